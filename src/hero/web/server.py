"""Running the application: uvicorn in the foreground (``hero serve``), or in a process of its
own beside the daemon (``hero watch --serve ADDR``, :mod:`hero.web.apart`).

The listening socket is bound here, before uvicorn starts, so that a bind error (the port
taken, an address not of this machine) is a one-line error, and so that the real port of
``--bind HOST:0`` is known: it is logged as ``serving on http://HOST:PORT``.

Binding to anything but loopback needs ``serve_token`` (config.local.yaml or
HERO_SERVE_TOKEN): :func:`check_bind` refuses to start without one.

The server reads files only and takes none of the daemon's locks, so it cannot hold a story
up; beside the daemon it has a process of its own, so it cannot slow one down either.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hero.web import ServeError

if TYPE_CHECKING:
    from hero.config.home import Config

DEFAULT_BIND = "127.0.0.1:8765"


@dataclass(frozen=True)
class Address:
    host: str
    port: int

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)

    def url(self, port: int | None = None) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port if port is None else port}"


def parse_bind(text: str) -> Address:
    """``HOST:PORT`` (``[::1]:8765`` for IPv6; port 0: any free port); ServeError naming
    what is wrong otherwise."""
    raw = text.strip()
    if raw.startswith("["):
        host, sep, port = raw[1:].partition("]:")
    else:
        host, sep, port = raw.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535 or len(raw) > 300:
        raise ServeError(
            f"--bind: expected HOST:PORT (e.g. {DEFAULT_BIND}, or [::1]:8765); found {text!r}"
        )
    return Address(host, int(port))


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(address: Address, token: str | None) -> None:
    """ServeError when the address is not loopback and no token is set."""
    if not address.loopback and not token:
        raise ServeError(
            f"--bind {address.host}:{address.port} listens beyond this machine: set "
            "serve_token in config.local.yaml (or HERO_SERVE_TOKEN) first, so that every "
            "request needs it; or bind to 127.0.0.1"
        )


def open_socket(address: Address) -> socket.socket:
    """The listening socket; ServeError when it cannot be bound."""
    family = socket.AF_INET6 if ":" in address.host else socket.AF_INET
    # IPPROTO_TCP, not 0: asyncio turns Nagle's algorithm off (TCP_NODELAY) only on a socket
    # that says it is TCP, and a connection accepted here inherits the protocol. With Nagle
    # on, an answer's body (written after its headers) waited for the client's delayed ACK:
    # 40 ms on every page and API answer of a keep-alive connection (bench/serve.py).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address.host, address.port))
        sock.listen(128)
        sock.set_inheritable(True)
    except OSError as exc:
        sock.close()
        raise ServeError(
            f"--bind {address.host}:{address.port}: cannot listen there: {exc.strerror or exc}"
        ) from None
    return sock


@dataclass
class Prepared:
    """An application and its bound socket, ready to run."""

    app: Any
    sock: socket.socket
    url: str


def listen(config: Config, bind: str) -> tuple[socket.socket, Address, str]:
    """The socket bound to ``bind`` for ``config``'s home, its address and its URL (the
    real port); ServeError when the extra is missing, the address is bad, it is not
    loopback and no token is set, or it cannot be listened on."""
    from hero.web import require

    require()
    address = parse_bind(bind)
    check_bind(address, config.serve_token)
    sock = open_socket(address)
    return sock, address, address.url(sock.getsockname()[1])


def make_app(config: Config, address: Address, log: Any, *, quiet: bool = False) -> Any:
    """The application over ``config``'s home, served at ``address``. ``quiet``: log only
    the requests that failed (beside the daemon)."""
    token = config.serve_token
    check_bind(address, token)
    from hero.web.app import create_app

    def request_log(event: str, **fields: Any) -> None:
        if not quiet or int(fields.get("status") or 0) >= 400:
            log.info(event, **fields)

    return create_app(
        config.home,
        token=token,
        repo=config.target_repo if config.target_repo.is_dir() else None,
        secrets_known=config.secrets,
        max_parallel=config.max_parallel,
        loopback=address.loopback,
        log=request_log,
    )


def prepare(config: Config, bind: str, log: Any) -> Prepared:
    """The application over ``config``'s home, and its socket bound to ``bind``; logs
    ``serving on URL``."""
    sock, address, url = listen(config, bind)
    try:
        app = make_app(config, address, log)
    except BaseException:
        sock.close()
        raise
    log.info(f"serving on {url}", url=url, token=bool(config.serve_token))
    return Prepared(app, sock, url)


def uvicorn_server(prepared: Prepared) -> Any:
    import uvicorn

    config = uvicorn.Config(
        prepared.app,
        log_level="warning",
        access_log=False,  # hero logs each request itself, without its query string
        lifespan="off",
        server_header=False,
        proxy_headers=False,
    )
    return uvicorn.Server(config)


def serve_forever(prepared: Prepared) -> None:
    """Serve until SIGTERM or Ctrl-C (uvicorn's handlers stop it cleanly; then the
    signal is raised again, to the handlers the caller set)."""
    server = uvicorn_server(prepared)
    try:
        server.run(sockets=[prepared.sock])
    finally:
        prepared.sock.close()
