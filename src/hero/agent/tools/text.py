"""Text rules the file and search tools share: spotting binary data, cutting over-long lines."""

from __future__ import annotations

BINARY_SNIFF_BYTES = 8192  # a NUL byte in this many leading bytes marks a file binary
LINE_MAX_CHARS = 500  # a grep hit or a diff line longer than this is cut


def is_binary(data: bytes) -> bool:
    return b"\x00" in data[:BINARY_SNIFF_BYTES]


def cut_line(line: str, limit: int) -> str:
    if len(line) <= limit:
        return line
    return f"{line[:limit]}... [{len(line) - limit} more characters]"
