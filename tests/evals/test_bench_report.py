"""`hero bench report`: resolve rates with intervals, cost and time, the paired comparison,
SWE-bench harness outputs beside hero's, as text, JSON and a static HTML page, over
handmade results files, through hero's command line."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hero.cli import main
from hero.evals.results import Result, append_line, results_path

TASKS = [f"calc__calc-{i}" for i in range(1, 11)]


def write(out: Path, name: str, outcomes: dict[str, bool], run: int = 1, **extra: Any) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for task, resolved in outcomes.items():
        result = Result(
            instance_id=task,
            run=run,
            resolved=resolved,
            rounds=extra.get("rounds", 2),
            tokens=extra.get("tokens", 1000),
            cost_usd=extra.get("cost_usd", 0.01),
            wall_s=extra.get("wall_s", 30.0),
            status="passed" if resolved else "gave_up",
        )
        append_line(results_path(out, name), result.to_json())


def report_json(out: Path, capsys: pytest.CaptureFixture[str], *more: str) -> dict[str, Any]:
    assert main(["bench", "report", str(out), "--json", *more]) == 0
    data = json.loads(capsys.readouterr().out)
    assert isinstance(data, dict)
    return data


def config(data: dict[str, Any], name: str) -> dict[str, Any]:
    found = [c for c in data["configurations"] if c["name"] == name]
    assert len(found) == 1, [c["name"] for c in data["configurations"]]
    return found[0]


def pair(data: dict[str, Any], a: str, b: str) -> dict[str, Any]:
    found = [c for c in data["comparisons"] if {c["a"], c["b"]} == {a, b}]
    assert len(found) == 1
    return found[0]


def test_a_resolving_all_against_b_resolving_none_is_named_and_significant(
    tmp_path: Path,
) -> None:
    out = tmp_path / "bench-out"
    write(out, "fix", {t: True for t in TASKS}, cost_usd=0.02, wall_s=40.0, tokens=3000)
    write(out, "nothing", {t: False for t in TASKS})
    shown = subprocess.run(
        [sys.executable, "-m", "hero", "bench", "report", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    fix = next(line for line in text.splitlines() if line.startswith("fix "))
    assert re.search(r"\b10\s+100\.0%\s+72\.2% - 100\.0%\s+\$0\.0200\s+\$0\.0200\s+40\.0 s", fix)
    nothing = next(line for line in text.splitlines() if line.startswith("nothing "))
    assert "0.0% - 27.8%" in nothing and "$0.0100" in nothing
    assert "fix vs nothing: 10 common tasks" in text
    assert "p = 0.001953, significant at 0.05" in text
    only_fix = next(line for line in text.splitlines() if "only fix (10)" in line)
    assert all(t in only_fix for t in TASKS)
    assert "only nothing (0): -" in text


def test_the_json_report_keys_and_the_paired_comparison(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    write(out, "A", {t: True for t in TASKS})
    write(out, "A2", {t: t != TASKS[3] for t in TASKS})  # one discordant task
    write(out, "B", {t: False for t in TASKS})
    data = report_json(out, capsys)
    assert set(data) == {"dir", "alpha", "configurations", "comparisons"}
    a = config(data, "A")
    assert set(a) == {
        "name", "source", "tasks", "runs", "task_runs", "resolved", "resolve_rate", "ci95",
        "runs_resolved", "run_resolve_rate", "cost_per_task", "cost_per_resolved",
        "wall_s_per_task", "wall_s_per_resolved", "tokens_per_task", "rounds_per_task",
        "statuses",
    }  # fmt: skip
    assert (a["source"], a["tasks"], a["resolved"], a["resolve_rate"]) == ("hero", 10, 10, 1.0)
    assert a["ci95"] == [pytest.approx(0.72247, abs=1e-5), 1.0]
    assert a["cost_per_task"] == pytest.approx(0.01) and a["tokens_per_task"] == 1000
    assert config(data, "B")["cost_per_resolved"] is None  # nothing resolved: no such cost
    assert len(data["comparisons"]) == 3
    close = pair(data, "A", "A2")
    assert set(close) == {
        "a", "b", "tasks", "both", "neither", "a_only", "b_only", "p_value", "significant",
    }  # fmt: skip
    assert (close["a_only"], close["b_only"], close["both"]) == ([TASKS[3]], [], 9)
    assert close["p_value"] == 1.0 and close["significant"] is False
    far = pair(data, "A", "B")
    assert far["a_only"] == sorted(TASKS) and far["b_only"] == []
    assert far["p_value"] == pytest.approx(2 / 1024) and far["significant"] is True


def test_paired_comparison_is_on_the_tasks_both_ran(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    write(out, "A", {t: True for t in TASKS})
    write(out, "B", {t: False for t in TASKS[:4]} | {"other-1": True})
    c = pair(report_json(out, capsys), "A", "B")
    assert c["tasks"] == 4 and c["a_only"] == sorted(TASKS[:4]) and c["b_only"] == []


def test_several_runs_count_a_task_by_the_majority_of_its_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    two, three = TASKS[:2], TASKS[2:5]
    write(out, "A", {t: True for t in two + three}, run=1)
    write(out, "A", {t: True for t in two} | {t: False for t in three}, run=2)
    write(out, "A", {t: False for t in two} | {t: False for t in three}, run=3)
    a = config(report_json(out, capsys), "A")
    # two tasks resolved in 2 of 3 runs count; three resolved in 1 of 3 do not
    assert (a["tasks"], a["runs"], a["task_runs"], a["resolved"]) == (5, 3, 15, 2)
    assert (a["runs_resolved"], a["run_resolve_rate"]) == (7, pytest.approx(7 / 15))
    assert a["cost_per_resolved"] == pytest.approx(15 * 0.01 / 7)


def test_a_repeated_line_for_a_task_and_run_counts_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    write(out, "A", {TASKS[0]: False})
    write(out, "A", {TASKS[0]: True})
    a = config(report_json(out, capsys), "A")
    assert (a["task_runs"], a["resolved"]) == (1, 1)


SWEBENCH_HARNESS = {
    "total_instances": 5,
    "submitted_instances": 5,
    "completed_instances": 4,
    "resolved_instances": 2,
    "unresolved_instances": 1,
    "empty_patch_instances": 1,
    "error_instances": 1,
    "completed_ids": TASKS[:4],
    "incomplete_ids": [],
    "empty_patch_ids": [TASKS[3]],
    "submitted_ids": TASKS[:5],
    "resolved_ids": TASKS[:2],
    "unresolved_ids": [TASKS[2]],
    "error_ids": [TASKS[4]],
    "schema_version": 2,
}


def test_a_swebench_harness_report_in_the_folder_is_read_with_unknown_cost(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    write(out, "hero-A", {t: True for t in TASKS})
    (out / "gpt-4o.run7.json").write_text(json.dumps(SWEBENCH_HARNESS), encoding="utf-8")
    (out / "unrelated.json").write_text('{"not": "a report"}', encoding="utf-8")
    data = report_json(out, capsys)
    assert [c["name"] for c in data["configurations"]] == ["hero-A", "swebench:gpt-4o.run7"]
    s = config(data, "swebench:gpt-4o.run7")
    assert (s["source"], s["tasks"], s["resolved"]) == ("swebench", 5, 2)
    assert s["statuses"] == {"empty_patch": 1, "error": 1, "resolved": 2, "unresolved": 1}
    assert s["cost_per_task"] is None and s["wall_s_per_task"] is None
    assert s["tokens_per_task"] is None and s["rounds_per_task"] is None
    c = pair(data, "hero-A", "swebench:gpt-4o.run7")
    assert c["tasks"] == 5 and c["a_only"] == sorted(TASKS[2:5]) and c["b_only"] == []
    assert main(["bench", "report", str(out)]) == 0
    text = capsys.readouterr().out
    row = next(line for line in text.splitlines() if line.startswith("swebench:gpt-4o.run7"))
    assert row.rstrip().endswith("-") and "$" not in row


def test_per_instance_reports_and_explicit_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    write(out, "A", {t: True for t in TASKS[:3]})
    logs = tmp_path / "logs" / "run_evaluation" / "run7" / "my-model"
    for task, resolved in zip(TASKS[:3], (True, False, False), strict=True):
        (logs / task).mkdir(parents=True)
        report = {task: {"patch_is_None": False, "resolved": resolved, "tests_status": {}}}
        (logs / task / "report.json").write_text(json.dumps(report), encoding="utf-8")
    files = [f"--swebench={p}" for p in sorted(logs.rglob("report.json"))]
    data = report_json(out, capsys, *files)
    s = config(data, "swebench:my-model.run7")
    assert (s["tasks"], s["resolved"]) == (3, 1)
    assert pair(data, "A", "swebench:my-model.run7")["a_only"] == sorted(TASKS[1:3])
    # and found by themselves under the folder
    data = report_json(tmp_path / "logs", capsys)
    assert [c["name"] for c in data["configurations"]] == ["swebench:my-model.run7"]


def test_the_html_page_has_the_chart_escapes_and_links_nowhere(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    hostile = "<script>alert(1)</script>"
    write(out, "A", {t: True for t in TASKS[:6]} | {t: False for t in TASKS[6:]} | {hostile: False})
    write(out, "B", {hostile: True, TASKS[0]: False})
    page = tmp_path / "report.html"
    assert main(["bench", "report", str(out), "--html", str(page)]) == 0
    assert str(page) in capsys.readouterr().out
    text = page.read_text(encoding="utf-8")
    assert text.startswith("<!doctype html>") and "<svg" in text and "</svg>" in text
    assert text.count("<rect") == 2  # a bar per configuration
    assert "<script" not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert not re.search(r"(https?:)?//[a-z0-9]", text, flags=re.IGNORECASE)
    assert not re.search(r"<(link|img|iframe)\b|\bsrc=|@import|url\(", text)


def test_json_and_html_together(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    write(out, "A", {TASKS[0]: True})
    page = tmp_path / "r.html"
    data = report_json(out, capsys, "--html", str(page))
    assert data["comparisons"] == [] and "<svg" in page.read_text(encoding="utf-8")


def test_clear_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nowhere"
    assert main(["bench", "report", str(missing)]) == 2
    assert f"{missing}: no such folder" in capsys.readouterr().err

    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["bench", "report", str(empty)]) == 2
    assert "no results-NAME.jsonl" in capsys.readouterr().err

    torn = tmp_path / "torn"
    write(torn, "A", {t: True for t in TASKS[:3]})
    with results_path(torn, "A").open("a", encoding="utf-8") as f:
        f.write('{"instance_id": "calc__calc-4", "run": 1, "reso')
    assert main(["bench", "report", str(torn)]) == 2
    assert f"{results_path(torn, 'A')}:4: not JSON" in capsys.readouterr().err

    garbage = tmp_path / "garbage"
    garbage.mkdir()
    results_path(garbage, "A").write_text('{"instance_id": "t1", "run": 1}\n', encoding="utf-8")
    assert main(["bench", "report", str(garbage)]) == 2
    assert f"{results_path(garbage, 'A')}:1: not a result" in capsys.readouterr().err

    odd = tmp_path / "odd.json"
    odd.write_text("[1, 2]", encoding="utf-8")
    assert main(["bench", "report", str(torn.parent / "empty"), "--swebench", str(odd)]) == 2
    assert f"{odd}: neither a SWE-bench harness report" in capsys.readouterr().err

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"resolved_ids": "x"}), encoding="utf-8")
    assert main(["bench", "report", str(empty), "--swebench", str(bad)]) == 2
    assert f"{bad}: resolved_ids: expected a list" in capsys.readouterr().err


def test_what_a_worker_writes_under_the_run_folder_is_not_taken_for_a_swebench_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`hero bench run --out DIR` keeps the task-runs' repositories under DIR/work/: a worker
    that writes a report.json (or a harness report) there adds no configuration."""
    out = tmp_path / "out"
    write(out, "A", {t: False for t in TASKS[:2]})
    forged = {TASKS[0]: {"resolved": True}}
    for where in ("work/A/s1/repo", f"work/A/s1/repo/x/y/{TASKS[0]}", f"homes/A/{TASKS[0]}"):
        (out / where).mkdir(parents=True, exist_ok=True)
        (out / where / "report.json").write_text(json.dumps(forged), encoding="utf-8")
        (out / where / "m.r.json").write_text(json.dumps(SWEBENCH_HARNESS), encoding="utf-8")
    (out / "elsewhere").mkdir()  # a folder not named as the instance its report holds
    (out / "elsewhere" / "report.json").write_text(json.dumps(forged), encoding="utf-8")
    data = report_json(out, capsys)
    assert [c["name"] for c in data["configurations"]] == ["A"]


def test_numbers_that_are_no_numbers_and_control_characters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    write(out, "A", {"task-\x1b[2J-1": True})
    write(out, "B", {"task-\x1b[2J-1": False})
    assert main(["bench", "report", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "\x1b" not in shown and "task-\\x1b[2J-1" in shown
    bad = tmp_path / "bad"
    bad.mkdir()
    line = {"instance_id": "t1", "run": 1, "resolved": True, "cost_usd": float("nan")}
    results_path(bad, "A").write_text(json.dumps(line) + "\n", encoding="utf-8")
    assert main(["bench", "report", str(bad)]) == 2
    assert "t1 run 1: cost_usd: expected a number of at least 0; found nan" in (
        capsys.readouterr().err
    )
