"""A deadline for the whole model call and a cap on the size of its answer, under the SDK.

The ``openai`` SDK's ``timeout`` is that of its HTTP client (httpx2): a limit on each read
of the socket, not on the call. A provider that sends one byte every half second never meets it, and holds a story
(and its slot) as long as it likes; and the SDK reads an answer whole, however large, so a
200 MB answer costs hundreds of MB of hero's memory. Both are the provider's to choose,
and hero trusts no provider for time or size (docs/reliability.md, "Time and size").

So every request of :class:`hero.llm.client.LlmClient` runs inside :func:`bounded`, which
holds the call's :class:`CallBounds` in a context variable (the SDK's HTTP client is
synchronous: its socket work runs in the calling thread, so the variable is the call's,
even when stories share one HTTP client across threads), and two wrappers installed on the
HTTP client by :func:`bound_http_client` apply it:

- at the socket (an ``httpcore2`` network backend): each connect, TLS handshake, write and
  read is given no more than what is left of the deadline, and none starts once it has
  passed; a status line, headers or body trickled byte by byte end at the deadline all the
  same;
- at the response (an ``httpx2`` transport): the answer's bytes, decoded (a compressed body
  is unpacked here, at most one cap's worth: a small gzip can unpack to gigabytes), are
  counted as they are read, and the read stops with :class:`ResponseTooLarge` once they
  pass the cap. Memory stays bounded by the cap, not by the answer.

Outside :func:`bounded` both wrappers pass everything through unchanged.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import httpcore2 as httpcore
import httpx2 as httpx

from hero.errors import HeroError


@dataclass
class CallBounds:
    """One model call's limits: ``deadline`` (``time.monotonic()``) for all of it, from
    ``timeout_s``; at most ``max_bytes`` of answer."""

    timeout_s: float
    max_bytes: int
    deadline: float = 0.0

    def __post_init__(self) -> None:
        if not self.deadline:
            self.deadline = time.monotonic() + self.timeout_s

    def passed(self) -> bool:
        return time.monotonic() >= self.deadline

    def limit(self, timeout: float | None, error: type[Exception]) -> float:
        """``timeout`` cut to what is left of the deadline; ``error`` once it has passed."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise error(f"the call's deadline of {self.timeout_s:g} s passed")
        return left if timeout is None else min(timeout, left)


class ResponseTooLarge(HeroError):
    """The answer passed the call's size cap; nothing more of it was read (the model client
    turns it into its own error, hero.llm.client.AnswerTooLarge)."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(f"the answer passed {max_bytes} bytes; the rest was not read")
        self.max_bytes = max_bytes


_BOUNDS: contextvars.ContextVar[CallBounds | None] = contextvars.ContextVar(
    "hero_llm_call_bounds", default=None
)


@contextlib.contextmanager
def bounded(timeout_s: float, max_bytes: int) -> Iterator[CallBounds]:
    """The model call made inside holds to ``timeout_s`` in all and ``max_bytes`` of answer
    (on an HTTP client that :func:`bound_http_client` prepared)."""
    bounds = CallBounds(timeout_s, max_bytes)
    token = _BOUNDS.set(bounds)
    try:
        yield bounds
    finally:
        _BOUNDS.reset(token)


def bound_http_client(client: httpx.Client) -> None:
    """Install the two wrappers on ``client``: on its transport and on each proxy mount
    (``HTTPS_PROXY`` and the like, which httpx2 made from the environment), so that every
    route a request can take holds to its bounds. Once per client: a second call (a client
    shared by two model clients) changes nothing.

    httpx2 has no public hook for either (a ``transport=`` argument would drop the proxies
    from the environment), so this sets the client's ``_transport`` and ``_mounts`` and the
    pool's ``_network_backend``; tests/llm/test_transport.py fails if a new httpx2 or httpcore2
    moves them. RuntimeError when the client's transport is not one this knows."""
    if isinstance(client._transport, _BoundedTransport):
        return
    client._transport = _BoundedTransport(_with_bounded_sockets(client._transport))
    client._mounts = {
        pattern: None if t is None else _BoundedTransport(_with_bounded_sockets(t))
        for pattern, t in client._mounts.items()
    }


def _with_bounded_sockets(transport: httpx.BaseTransport) -> httpx.BaseTransport:
    pool = getattr(transport, "_pool", None)
    backend = getattr(pool, "_network_backend", None)
    if pool is None or backend is None:
        raise RuntimeError(
            f"cannot bound model calls on the HTTP transport {type(transport).__name__} "
            f"(httpx2 {httpx.__version__}, httpcore2 {httpcore.__version__}): no connection "
            "pool with a network backend"
        )
    if not isinstance(backend, _BoundedBackend):
        pool._network_backend = _BoundedBackend(backend)
    return transport


# --------------------------------------------------------------------------- at the socket


class _BoundedBackend(httpcore.NetworkBackend):
    """httpcore2's network backend, each connect given at most what is left of the call."""

    def __init__(self, inner: httpcore.NetworkBackend) -> None:
        self._inner = inner

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        bounds = _BOUNDS.get()
        if bounds is not None:
            timeout = bounds.limit(timeout, httpcore.ConnectTimeout)
        stream = self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
        return _BoundedStream(stream)

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        bounds = _BOUNDS.get()
        if bounds is not None:
            timeout = bounds.limit(timeout, httpcore.ConnectTimeout)
        return _BoundedStream(self._inner.connect_unix_socket(path, timeout, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class _BoundedStream(httpcore.NetworkStream):
    """A connection whose every read and write is given at most what is left of the call
    that uses it now (a kept-alive connection serves one call after another)."""

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        bounds = _BOUNDS.get()
        if bounds is not None:
            timeout = bounds.limit(timeout, httpcore.ReadTimeout)
        return self._inner.read(max_bytes, timeout)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        bounds = _BOUNDS.get()
        if bounds is not None:
            timeout = bounds.limit(timeout, httpcore.WriteTimeout)
        self._inner.write(buffer, timeout)

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: Any,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        bounds = _BOUNDS.get()
        if bounds is not None:
            timeout = bounds.limit(timeout, httpcore.ConnectTimeout)
        return _BoundedStream(self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


# --------------------------------------------------------------------------- at the response

#: The encodings hero asks for, and unpacks itself (bounded): zlib's, nothing else.
_ENCODINGS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


class _BoundedTransport(httpx.BaseTransport):
    """A transport whose answers, inside :func:`bounded`, are read at most up to the cap."""

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self._inner = inner

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        bounds = _BOUNDS.get()
        if bounds is None:
            return self._inner.handle_request(request)
        request.headers["Accept-Encoding"] = "gzip, deflate"  # what _BoundedBody unpacks
        response = self._inner.handle_request(request)
        encoding = response.headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("", "identity") and encoding not in _ENCODINGS:
            response.close()
            raise httpx.DecodingError(
                f"the answer came with Content-Encoding {encoding!r}, which hero did not "
                "ask for and does not unpack"
            )
        headers = [
            (k, v)
            for k, v in response.headers.multi_items()
            if k.lower() not in ("content-encoding", "content-length")
        ]
        return httpx.Response(
            response.status_code,
            headers=headers,
            stream=_BoundedBody(response, bounds.max_bytes, _ENCODINGS.get(encoding)),
            extensions=response.extensions,
            request=request,
        )

    def close(self) -> None:
        self._inner.close()


class _BoundedBody(httpx.SyncByteStream):
    """A response's body, unpacked if compressed, that raises ResponseTooLarge rather than
    yield more than ``max_bytes``."""

    def __init__(self, response: httpx.Response, max_bytes: int, wbits: int | None) -> None:
        self._response = response
        self._max = max_bytes
        self._unpack = zlib.decompressobj(wbits) if wbits is not None else None

    def __iter__(self) -> Iterator[bytes]:
        stream = self._response.stream
        if not isinstance(stream, httpx.SyncByteStream):  # a sync transport's never is
            raise TypeError(f"a synchronous transport answered with {type(stream).__name__}")
        seen = 0
        for chunk in stream:
            if self._unpack is not None:
                # at most one byte past the cap out of this chunk: a bomb is never unpacked
                chunk = self._unpack.decompress(chunk, self._max - seen + 1)
                if self._unpack.unconsumed_tail:
                    raise ResponseTooLarge(self._max)
            seen += len(chunk)
            if seen > self._max:
                raise ResponseTooLarge(self._max)
            if chunk:
                yield chunk

    def close(self) -> None:
        self._response.close()
