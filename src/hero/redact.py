"""Secret redaction: every secret value hero knows, taken out of what it writes and sends.

A :class:`Redactor` is built once from ``Config.secrets`` (API keys, sensitive header
values) and replaces each occurrence of a secret in a text with ``[redacted]``. It finds a
secret in the forms a command prints without trying to hide it:

- the value itself, also broken over lines (a newline, or CR LF, anywhere inside it, as
  ``fold`` or a wrapped terminal line leaves it);
- its base64 (standard and URL-safe alphabets, at any of the three byte alignments, so the
  value is found inside ``base64 .env`` too, and wrapped at 76 columns as ``base64``
  prints it): the characters that encode only the secret's bytes are replaced, so up to
  three characters at each end, mixed with the bytes around the secret, may remain;
- its hex as one run, lower or upper case (``xxd -p``, ``od`` without spaces).

The encodings are only looked for when a secret has at least ``MIN_ENCODED_CHARS``
characters (a short one would match ordinary text). Anything else (a secret reversed,
spaced out, split by a command on purpose, encrypted) is not found: redaction is a net for
what a command prints by accident, the environment without the keys (``runner.child_env``)
is the wall.

The common case is a text holding no secret: it costs one copy of the text without its
line breaks and one substring search (``str.__contains__``) per form, a few microseconds
per form for 20 kB. Only a text that holds one pays for finding the spans.
"""

from __future__ import annotations

import base64
import re
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from typing import IO, Any

#: What a secret is replaced with.
REDACTED = "[redacted]"
#: Shorter values are not treated as secrets (they would match ordinary text).
MIN_SECRET_CHARS = 4
#: Secrets at least this long are also looked for as base64 and hex.
MIN_ENCODED_CHARS = 8
#: The chunk a stream is read in by ``Redactor.holds_stream``.
STREAM_CHUNK_BYTES = 1 << 20

_BREAK = re.compile(r"[\r\n]")


class Redactor:
    """Finds and replaces the secrets in texts. Immutable; share one per configuration."""

    __slots__ = ("_forms", "_longest")

    def __init__(self, secrets: Iterable[str]) -> None:
        forms: set[str] = set()
        for secret in secrets:
            value = _unbroken(secret)
            if len(value) < MIN_SECRET_CHARS:
                continue
            forms.add(value)
            if len(value) >= MIN_ENCODED_CHARS:
                forms.update(_encodings(value))
        # longest first: where forms overlap, the spans are merged anyway, but a search
        # that stops at the first hit (``holds``) finds the commonest, longest form first
        self._forms: tuple[str, ...] = tuple(sorted(forms, key=lambda f: (-len(f), f)))
        self._longest = len(self._forms[0]) if self._forms else 0

    def __bool__(self) -> bool:
        return bool(self._forms)

    def __repr__(self) -> str:  # never the values
        return f"Redactor({len(self._forms)} forms)"

    def holds(self, text: str) -> bool:
        """Whether ``text`` holds a secret in any form this redactor finds."""
        if not self._forms or not text:
            return False
        flat = _unbroken(text)
        return any(form in flat for form in self._forms)

    def redact(self, text: str) -> str:
        """``text`` with every secret replaced by ``[redacted]`` (the same object back when
        it holds none)."""
        if not self._forms or not text:
            return text
        flat = _unbroken(text)
        hits = [form for form in self._forms if form in flat]
        if not hits:
            return text
        return _replace(text, flat, hits)

    def redact_value(self, value: Any) -> Any:
        """``value`` with every string in it redacted: strings, and the keys and values of
        mappings and sequences, recursively (a copy when anything changed). One search over
        all its strings at once decides whether anything needs to change: a record of many
        small strings (a state file) costs about as little as one string of the same size."""
        if not self._forms:
            return value
        found: list[str] = []
        _strings(value, found)
        # NUL between the strings: no form holds one, so no match spans two strings
        if not self.holds("\0".join(found)):
            return value
        return self._walk(value)

    def _walk(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.redact(value)
        if isinstance(value, Mapping):
            return {self._walk(k): self._walk(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            items = [self._walk(v) for v in value]
            return items if isinstance(value, list) else tuple(items)
        return value

    def holds_stream(self, stream: IO[bytes], chunk_bytes: int = STREAM_CHUNK_BYTES) -> bool:
        """Whether a binary stream holds a secret (as text, undecodable bytes aside), read
        in chunks that overlap by enough for a form split across two of them."""
        if not self._forms:
            return False
        overlap = 8 * self._longest  # room for a form broken by line breaks, in UTF-8
        tail = b""
        while chunk := stream.read(chunk_bytes):
            window = tail + chunk
            if self.holds(window.decode("utf-8", errors="replace")):
                return True
            tail = window[-overlap:]
        return False


def _strings(value: Any, out: list[str]) -> None:
    """Append every string in ``value`` (mapping keys too) to ``out``."""
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, Mapping):
        for k, v in value.items():
            _strings(k, out)
            _strings(v, out)
    elif isinstance(value, list | tuple):
        for v in value:
            _strings(v, out)


def _unbroken(text: str) -> str:
    """``text`` without its line breaks (the same object when it has none)."""
    if "\n" in text:
        text = text.replace("\n", "")
    if "\r" in text:
        text = text.replace("\r", "")
    return text


def _encodings(value: str) -> set[str]:
    """The base64 (both alphabets, each byte alignment) and hex forms of ``value``."""
    raw = value.encode("utf-8")
    forms = {raw.hex(), raw.hex().upper()}
    for pad in range(3):
        for encode in (base64.b64encode, base64.urlsafe_b64encode):
            encoded = encode(b"\0" * pad + raw).decode("ascii")
            # the characters that encode the secret's bits alone: 6-bit group j covers
            # bits [6j, 6j+6) of the input, the secret bits [8*pad, 8*(pad+len))
            first = -(-8 * pad // 6)
            last = 8 * (pad + len(raw)) // 6
            middle = encoded[first:last]
            if len(middle) >= MIN_ENCODED_CHARS:
                forms.add(middle)
    return forms


def _replace(text: str, flat: str, hits: Sequence[str]) -> str:
    """Replace each occurrence of ``hits`` in ``flat`` (``text`` without line breaks), mapped
    back onto ``text``; overlapping occurrences become one ``[redacted]``."""
    spans: list[tuple[int, int]] = []
    for form in hits:
        start = flat.find(form)
        while start != -1:
            spans.append((start, start + len(form)))
            start = flat.find(form, start + 1)
    spans.sort()
    merged: list[list[int]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    # flat position f is text position f + (line breaks before it); break k, at text
    # position p, comes before flat position f when p - k <= f
    breaks = [] if flat is text else [m.start() - k for k, m in enumerate(_BREAK.finditer(text))]
    out: list[str] = []
    at = 0
    for start, end in merged:
        begin = start + bisect_right(breaks, start)
        stop = end + bisect_right(breaks, end - 1)
        out.append(text[at:begin])
        out.append(REDACTED)
        at = stop
    out.append(text[at:])
    return "".join(out)


class RedactingModel:
    """A model whose requests have every secret redacted from their messages first: for a
    role whose prompt is built once from files hero does not control (the reviewer's diff,
    log and story). The worker's loop redacts what enters its history instead, once."""

    def __init__(self, model: Any, redactor: Redactor) -> None:
        self.model = model
        self.redactor = redactor

    def complete(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None = None
    ) -> Any:
        return self.model.complete(self.redactor.redact_value(list(messages)), tools)
