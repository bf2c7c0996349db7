"""Where the worker's and the checks' commands run: bubblewrap (``bwrap``), one sandbox per
round (``session``) with its PID 1 (``pid1``), and the limits on every command (``limits``)."""
