"""`hero bench`: which model, prompt or setting resolves more of a repository's own work.

Tasks in SWE-bench's format made from the repository's history (``make``), run as stories
under named configurations with the hidden tests judged in the sandbox (``runner``,
``judge``), and reported with confidence intervals and a paired comparison (``report``).
``tasks`` and ``results`` are the file formats every part shares (docs/bench.md).
"""
