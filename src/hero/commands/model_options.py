"""`hero run --model` and `--reasoning-effort`: a story's models for one run.

Only the options here: hero.llm.models reads them (``override_of``) once the command runs, so
that `hero --help` does not load the story and configuration modules.
"""

from __future__ import annotations

import argparse


def add_options(parser: argparse.ArgumentParser) -> None:
    """--model and --reasoning-effort, each repeatable (see hero.llm.models.parse_override)."""
    parser.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="[ROLE=]MODEL",
        help="the model for this run only, over the story's model: field: MODEL for the "
        "worker and the reviewer, or worker=MODEL / reviewer=MODEL (repeat the option); "
        "PROVIDER:MODEL for a model on another provider of config/providers/",
    )
    parser.add_argument(
        "--reasoning-effort",
        action="append",
        default=[],
        metavar="[ROLE=]EFFORT",
        help="the reasoning effort for this run only (low, high, ...; none: not sent), for "
        "both roles or worker=EFFORT / reviewer=EFFORT",
    )
