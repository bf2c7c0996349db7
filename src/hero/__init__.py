"""hero: user stories in, git commits out."""

__version__ = "0.1.0"
