"""A story's ``labels:`` from its file to the board (issue 37): `hero run` records them in
the run record, `hero status --json` and the status page show them, and the page and
``/api/stories`` filter by them; a bad label keeps the file out of the queue with a reason
naming the file and the field. Real parts: hero's CLI, the scripted model over HTTP, a real
git repository, the real app (Starlette's TestClient)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import SUB_IMPL, commit_once, is_review, step_of, verdict

from hero.cli import main
from hero.llm.scripted import ScriptedModel, call, text
from hero.state import RunState

pytest.importorskip("starlette", reason="the serve extra is not installed")
pytest.importorskip("httpx", reason="Starlette's TestClient needs httpx")

from starlette.testclient import TestClient

from hero.web.app import create_app


def _worker(body: dict[str, Any]) -> Any:
    if is_review(body):
        return verdict("APPROVED", "Fine.")
    plan = [
        call("write_file", path="calc/__init__.py", content=SUB_IMPL),
        call("bash", command=commit_once("add-sub")),
        text("Added calc.sub."),
    ]
    return plan[min(step_of(body), len(plan) - 1)]


def _status(home: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["status", "--json", "--home", str(home)]) == 0
    return dict(json.loads(capsys.readouterr().out))


@pytest.mark.slow
def test_a_run_records_the_storys_labels_and_the_board_filters_by_them(
    scripted: Callable[..., ScriptedModel],
    make_home: Callable[..., Path],
    write_story: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    home = make_home(scripted(_worker))
    story = write_story(home, "labelled", verify=["true"], labels=["ui", "good first issue"])
    assert main(["run", str(story), "--home", str(home)]) == 0
    capsys.readouterr()

    record = json.loads((home / "runs" / "state" / "labelled.json").read_text())
    assert record["status"] == "passed" and record["labels"] == ["ui", "good first issue"]
    (row,) = _status(home, capsys)["stories"]
    assert row["labels"] == ["ui", "good first issue"]

    client = TestClient(create_app(home, token=None), base_url="http://127.0.0.1")
    keys = re.compile(r'<tr class="story" data-key="([^"]+)">')
    assert keys.findall(client.get("/?label=Good+First+Issue").text) == ["labelled"]
    assert keys.findall(client.get("/?label=bug").text) == []
    assert [s["key"] for s in client.get("/api/stories?label=ui").json()["stories"]] == ["labelled"]
    assert client.get("/api/stories?label=bug").json()["stories"] == []
    page = client.get("/stories/labelled").text
    assert '<a class="label" href="/?label=good%20first%20issue">good first issue</a>' in page


def test_a_story_without_labels_records_none() -> None:
    assert "labels" not in RunState("s").to_dict()  # a record as before labels
    assert RunState.from_dict({"id": "s", "labels": ["a"]}).to_dict()["labels"] == ["a"]
    with pytest.raises(TypeError, match="labels"):
        RunState.from_dict({"id": "s", "labels": "a"})


def test_a_bad_label_keeps_the_file_out_of_the_queue_and_says_where(
    tmp_path: Path,
    write_story: Callable[..., Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    home = tmp_path / "home"
    (home / "config").mkdir(parents=True)
    write_story(home, "good", labels=["ui"])
    write_story(home, "bad", labels=["ui", {"not": "a word"}])
    report = _status(home, capsys)
    assert [item["id"] for item in report["queue"]] == ["good"]
    (rejected,) = report["rejected"]
    assert rejected["path"] == "inbox/bad.md"
    assert rejected["reason"].startswith("labels: expected a list of non-empty strings; item 2")
