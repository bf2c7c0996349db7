"""What the commands share: build the models a config names and run one story.

`hero run` (cli) and `hero demo` both call this, so neither imports the other.
"""

from __future__ import annotations

from pathlib import Path

from hero.config import Config
from hero.pipeline import Progress
from hero.state import RunState


def run_with_config(
    story_path: Path, config: Config, *, progress: Progress | None = None
) -> RunState:
    """Build the models from the config and run the story: the path `hero run` and the demo share."""
    from hero.llm import LlmClient
    from hero.pipeline import run_story

    def retry_note(msg: str) -> None:
        if progress:
            progress(f"model: {msg}")

    worker = LlmClient(config.role("worker"), config.llm, on_retry=retry_note)
    reviewer = LlmClient(
        config.role("reviewer"), config.llm, on_retry=retry_note, share_http_with=worker
    )
    return run_story(story_path, config, worker, reviewer, progress=progress)
