"""textkit: small text helpers."""

from textkit.words import word_count

__all__ = ["word_count"]
