"""The bench on the status page: `hero bench run`'s output folders recorded in the home
(runs/bench/folders.json), listed at /bench and each shown at /bench/NAME with the numbers
`hero bench report --json` gives, two inline SVG charts and the paired comparison; the same
data at /api/bench/NAME. Hostile records, folders and results files are messages, never a 500,
and every text is escaped. Through the real Starlette app, over results files written in
their documented format, and (slow) a real `hero bench run` served by a real `hero serve`."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from serve_support import Page

from hero.cli import main
from hero.errors import HeroError
from hero.evals.folders import folders_path, read_folders, record_folder
from hero.evals.results import Result, append_line, results_path

pytest.importorskip("starlette", reason="the serve extra is not installed")
pytest.importorskip("httpx", reason="Starlette's TestClient needs httpx")

from starlette.testclient import TestClient

from hero.web import bench as web_bench
from hero.web.app import create_app

TASKS = [f"repo__m{i}" for i in range(1, 11)]
HOSTILE = '<img src=x onerror="alert(1)">&amp;'
SECRET = "sk-bench-web-test-0a1b2c3d4e5f6071"


def write(out: Path, name: str, resolved: set[str], cost: float = 0.02) -> None:
    """A results file as `hero bench run` writes it: a line per task and run."""
    out.mkdir(parents=True, exist_ok=True)
    for n, task in enumerate(TASKS):
        result = Result(
            instance_id=task,
            run=1,
            resolved=task in resolved,
            rounds=1 + n % 3,
            tokens=1000 + 10 * n,
            cost_usd=cost * (1 + n % 2),
            wall_s=20.0 + n,
            status="passed" if task in resolved else "gave_up",
        )
        append_line(results_path(out, name), result.to_json())


def client(home: Path, secrets: tuple[str, ...] = ()) -> TestClient:
    app = create_app(home, token=None, secrets_known=secrets)
    return TestClient(app, base_url="http://127.0.0.1:8765", follow_redirects=False)


def inert(html: str) -> Page:
    """No script but the shipped one, no handler attribute, no tag a hostile text made."""
    page = Page(html)
    assert [a for t, a in page.tags if t == "script"] == [{"src": "/static/live.js", "defer": None}]
    for tag, attrs in page.tags:
        assert not any(name.startswith("on") for name in attrs), (tag, attrs)
        assert tag not in ("img", "iframe", "object", "embed", "b"), (tag, attrs)
    return page


def cells(html: str, table: str) -> list[list[str]]:
    """The text of each cell of each body row of ``<table class="{table}">``."""
    body = html.split(f'<table class="{table}">', 1)[1].split("</table>", 1)[0]
    body = body.split("<tbody>", 1)[1]
    out = []
    for row in re.findall(r"<tr[^>]*>(.*?)</tr>", body, re.S):
        found = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
        out.append([Page(c).all_text.strip() for c in found])
    return out


@pytest.fixture
def home(tmp_path: Path) -> Path:
    where = tmp_path / "home with space"
    (where / "runs").mkdir(parents=True)
    return where


@pytest.fixture
def out(tmp_path: Path, home: Path) -> Path:
    """A folder where A resolves all ten tasks and B three, recorded as `hero bench run`
    records it."""
    folder = tmp_path / "bench out"
    write(folder, "A", set(TASKS), cost=0.05)
    write(folder, "B", set(TASKS[:3]))
    record_folder(home, folder, ["A", "B"])
    return folder


def cli_json(out: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["bench", "report", str(out), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert isinstance(data, dict)
    return data


# ----------------------------------------------------------------------------- the pages


def test_the_folder_page_shows_the_numbers_of_hero_bench_report(
    home: Path, out: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = cli_json(out, capsys)
    c = client(home)
    listing = c.get("/bench")
    assert listing.status_code == 200
    page = inert(listing.text)
    assert ("a", {"href": "/bench/bench-out"}) in page.tags
    assert "A, B" in page.all_text and str(out) in page.all_text

    r = c.get("/bench/bench-out")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    page = inert(r.text)
    rows = {row[0]: row for row in cells(r.text, "bench-report")}
    assert sorted(rows) == ["A", "B"]
    for conf in expected["configurations"]:
        row = rows[conf["name"]]
        assert row[1] == str(conf["tasks"]) and row[3] == str(conf["resolved"])
        assert row[4] == f"{100 * conf['resolve_rate']:.1f}%"
        low, high = conf["ci95"]
        assert row[5] == f"{100 * low:.1f}% - {100 * high:.1f}%"
        assert row[6] == f"${conf['cost_per_task']:.4f}"
        assert row[7] == f"${conf['cost_per_resolved']:.4f}"
        assert row[8] == f"{conf['wall_s_per_task']:.1f} s"
        assert row[9] == f"{conf['wall_s_per_resolved']:.1f} s"
    (pair,) = expected["comparisons"]
    assert (pair["a"], pair["b"], len(pair["a_only"]), pair["significant"]) == ("A", "B", 7, True)
    (shown,) = cells(r.text, "bench-pairs")
    assert shown[:5] == ["A", "B", "10", "3", "0"]
    assert shown[5:7] == ["7", "0"]
    assert f"only A (vs B, 7): {', '.join(pair['a_only'])}" in page.all_text
    assert "only B (vs A, 0): -" in page.all_text
    assert shown[7] == f"{pair['p_value']:.4g}" and shown[8] == "yes"
    # two charts drawn here, inline: the rates with their intervals, the cost per resolved
    charts = [a for t, a in page.tags if t == "svg"]
    assert [a.get("class") for a in charts] == ["chart", "chart"]
    assert r.text.count('class="ci"') == 3 * 2  # a whisker and its two ends per configuration
    assert "100.0% (72.2% - 100.0%)" in page.all_text
    assert "$0.0750 per resolved ($0.0750 per task)" in page.all_text
    assert 'href="http' not in r.text and "src=" not in r.text.replace('src="/static/live.js"', "")

    api = c.get("/api/bench/bench-out")
    assert api.status_code == 200 and api.json() == expected


def test_the_list_is_newest_first_and_in_the_nav(home: Path, tmp_path: Path, out: Path) -> None:
    other = tmp_path / "x" / "bench out"  # the same base name: a name of its own
    write(other, "C", set())
    record_folder(home, other, ["C"])
    listing = client(home).get("/api/bench").json()
    assert [f["name"] for f in listing["folders"]] == ["bench-out-2", "bench-out"]
    assert listing["folders"][0]["path"] == str(other) and listing["problems"] == []
    assert all(f["problem"] is None for f in listing["folders"])
    board = client(home).get("/")
    assert ("a", {"href": "/bench"}) in Page(board.text).tags


def test_record_keeps_name_first_time_and_configurations(home: Path, out: Path) -> None:
    first = read_folders(home).folders[0]
    again = record_folder(home, out, ["B", "C"])
    assert (again.name, again.first, again.configurations) == (
        first.name,
        first.first,
        ("A", "B", "C"),
    )
    assert again.last >= first.last
    data = json.loads(folders_path(home).read_text())
    assert data["version"] == 1 and len(data["folders"]) == 1


def test_an_unreadable_record_is_not_overwritten(home: Path, tmp_path: Path) -> None:
    path = folders_path(home)
    path.parent.mkdir(parents=True)
    path.write_text('{"folders": [{"name": "a"')
    with pytest.raises(HeroError, match=r"not JSON.*not recorded"):
        record_folder(home, tmp_path, ["A"])
    assert path.read_text() == '{"folders": [{"name": "a"'


def test_a_record_that_cannot_be_written_is_a_warning_and_the_run_goes_on(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from hero.evals.runner import _record

    path = folders_path(home)
    path.parent.mkdir(parents=True)
    path.write_text("not json")
    _record(home, tmp_path / "out", ["A"])
    err = capsys.readouterr().err
    assert err.startswith("hero bench: warning: runs/bench/folders.json: not JSON")
    assert "is not recorded there" in err and path.read_text() == "not json"


def test_a_record_of_too_many_folders_is_read_in_part(home: Path, tmp_path: Path) -> None:
    from hero.evals.folders import MAX_FOLDERS

    entry = {"path": "/nowhere", "first": 1, "last": 1, "configurations": []}
    many = [{**entry, "name": f"f{n}"} for n in range(MAX_FOLDERS + 5)]
    path = folders_path(home)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"folders": many}))
    record = read_folders(home)
    assert len(record.folders) == MAX_FOLDERS
    assert record.problems == (
        f"runs/bench/folders.json: {MAX_FOLDERS + 5} folders; the first {MAX_FOLDERS} are read",
    )
    assert client(home).get("/bench").status_code == 200


def test_escaped_everywhere_and_secrets_redacted(home: Path, tmp_path: Path) -> None:
    folder = tmp_path / "hostile"
    write(folder, "A", set(TASKS[:5]))
    # a configuration named with HTML (a file put there by hand) and a hostile task id
    hostile_file = folder / f"results-{HOSTILE}.jsonl"
    append_line(hostile_file, Result(HOSTILE, 1, True, 1, 1, 0.1, 1.0, "passed").to_json())
    append_line(hostile_file, Result(TASKS[9], 1, True, 1, 1, 0.1, 1.0, SECRET).to_json())
    record_folder(home, folder, ["A", HOSTILE])
    c = client(home, secrets=(SECRET,))
    for url in ("/bench", "/bench/hostile"):
        r = c.get(url)
        assert r.status_code == 200
        page = inert(r.text)
        assert HOSTILE in page.all_text  # shown as the text it is
        assert SECRET not in r.text
    api = c.get("/api/bench/hostile").json()
    assert HOSTILE in [conf["name"] for conf in api["configurations"]]
    assert SECRET not in json.dumps(api)


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"folders": [{"name": "a", "pa', "not JSON"),
        ("\x00\xff not json", "not JSON"),
        ('["a list"]', 'expected {"folders": [...]}'),
        (None, "too large"),
        ("link", "expected a regular file; found a symlink"),
        ("fifo", "expected a regular file; found a FIFO"),
    ],
)
def test_a_bad_record_is_a_message(
    home: Path, tmp_path: Path, content: str | None, message: str
) -> None:
    path = folders_path(home)
    path.parent.mkdir(parents=True)
    if content is None:
        path.write_text(" " * (5 << 20))
    elif content == "link":
        (tmp_path / "elsewhere.json").write_text('{"folders": []}')
        path.symlink_to(tmp_path / "elsewhere.json")
    elif content == "fifo":
        os.mkfifo(path)
    else:
        path.write_bytes(content.encode("utf-8", "surrogateescape"))
    c = client(home)
    r = c.get("/bench")
    assert r.status_code == 200
    page = inert(r.text)
    assert "runs/bench/folders.json" in page.all_text and message in page.all_text
    assert c.get("/api/bench").json()["problems"][0].startswith("runs/bench/folders.json: ")
    assert c.get("/bench/a").status_code == 404


def test_a_bad_entry_is_named_and_the_others_shown(home: Path, out: Path) -> None:
    path = folders_path(home)
    data = json.loads(path.read_text())
    data["folders"] += [
        {"name": "x", "path": "relative", "first": 1, "last": 2, "configurations": []},
        {"name": "<b>", "path": "/x", "first": 1, "last": 2},
        {"name": "y", "path": "/y", "first": "soon", "last": 2},
        "not an object",
    ]
    path.write_text(json.dumps(data))
    listing = client(home).get("/api/bench").json()
    assert [f["name"] for f in listing["folders"]] == ["bench-out"]
    problems = listing["problems"]
    assert len(problems) == 4
    assert "folder 2: path: expected an absolute path" in problems[0]
    assert "folder 3: name: expected letters" in problems[1] and "'<b>'" in problems[1]
    assert "folder 4: first: expected a time" in problems[2]
    assert "folder 5: expected an object" in problems[3]
    page = inert(client(home).get("/bench").text)
    assert "'<b>'" in page.all_text


def _gone(out: Path, tmp_path: Path) -> str:
    os.rename(out, tmp_path / "moved")
    return "no longer exists"


def _symlink(out: Path, tmp_path: Path) -> str:
    elsewhere = tmp_path / "elsewhere"
    write(elsewhere, "Z", set(TASKS))
    os.rename(out, tmp_path / "moved")
    out.symlink_to(elsewhere)
    return "is a symlink now"


def _symlink_above(out: Path, tmp_path: Path) -> str:
    # the folder's parent is a link now (it was a folder when recorded): it leads elsewhere
    write(tmp_path / "p" / "bench out", "Z", set(TASKS))
    (tmp_path / "d").symlink_to(tmp_path / "p")
    record = folders_path(tmp_path / "home with space")
    record.write_text(record.read_text().replace(str(out), str(tmp_path / "d" / "bench out")))
    return "a symlink on its way leads elsewhere"


def _not_a_folder(out: Path, tmp_path: Path) -> str:
    os.rename(out, tmp_path / "moved")
    out.write_text("a file")
    return "not a folder"


def _torn(out: Path, tmp_path: Path) -> str:
    with results_path(out, "A").open("a") as fh:
        fh.write('{"instance_id": "repo__m1", "run": 2, "resol')
    return f"{results_path(out, 'A')}:11: not JSON"


def _not_json(out: Path, tmp_path: Path) -> str:
    results_path(out, "B").write_text("<html>hello</html>\n")
    return f"{results_path(out, 'B')}:1: not JSON"


def _not_a_result(out: Path, tmp_path: Path) -> str:
    results_path(out, "B").write_text('{"instance_id": "x"}\n')
    return f"{results_path(out, 'B')}:1: not a result"


def _huge(out: Path, tmp_path: Path) -> str:
    with results_path(out, "B").open("a") as fh:
        fh.write(" " * (web_bench.MAX_READ_BYTES + 1))
    return "more than the page reads"


def _deep(out: Path, tmp_path: Path) -> str:
    results_path(out, "B").write_text("[" * 200_000 + "\n")
    return str(results_path(out, "B"))


def _results_link(out: Path, tmp_path: Path) -> str:
    (tmp_path / "secret.jsonl").write_text("")
    results_path(out, "C").symlink_to(tmp_path / "secret.jsonl")
    return "not a regular file"


def _results_fifo(out: Path, tmp_path: Path) -> str:
    os.mkfifo(results_path(out, "C"))
    return "not a regular file"


def _empty(out: Path, tmp_path: Path) -> str:
    for name in ("A", "B"):
        results_path(out, name).unlink()
    return "no results-NAME.jsonl"


@pytest.mark.parametrize(
    "spoil",
    [
        _gone,
        _symlink,
        _symlink_above,
        _not_a_folder,
        _torn,
        _not_json,
        _not_a_result,
        _huge,
        _deep,
        _results_link,
        _results_fifo,
        _empty,
    ],
)
def test_a_bad_folder_or_results_file_is_a_message(
    home: Path, out: Path, tmp_path: Path, spoil: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(web_bench, "MAX_READ_BYTES", 1 << 20)  # the files here are small
    message = spoil(out, tmp_path)
    c = client(home)
    r = c.get("/bench/bench-out")
    assert r.status_code == 200
    page = inert(r.text)
    problem = page.all_text.split("last run", 1)[1]
    assert message in problem, problem
    assert '<svg class="chart"' not in r.text and 'class="bench-report"' not in r.text
    api = c.get("/api/bench/bench-out")
    assert api.status_code == 422 and message in api.json()["error"]
    listing = c.get("/bench")
    assert listing.status_code == 200
    inert(listing.text)


def test_unknown_names_are_404_and_the_pages_read_only(home: Path, out: Path) -> None:
    c = client(home)
    assert c.get("/bench/%2e%2e%2fetc").status_code == 404
    for name in ("nope", "...", "a" * 300, "<b>", "bench-out.json"):
        r = c.get(f"/bench/{name}")
        assert r.status_code == 404, name
        assert "no such bench folder" in Page(r.text).all_text
        api = c.get(f"/api/bench/{name}")
        assert api.status_code == 404 and api.json() == {"error": "no such bench folder"}
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        assert c.request(method, "/bench/bench-out").status_code == 405
        assert c.request(method, "/api/bench").status_code == 405


def test_an_unchanged_folder_page_is_a_304_until_a_result_lands(home: Path, out: Path) -> None:
    c = client(home)
    first = c.get("/bench/bench-out")
    etag = first.headers["etag"]
    assert c.get("/bench/bench-out", headers={"If-None-Match": etag}).status_code == 304
    write(out, "C", set(TASKS[:1]))
    changed = c.get("/bench/bench-out", headers={"If-None-Match": etag})
    assert changed.status_code == 200 and ">C<" in changed.text


# ----------------------------------------------------------------------------- end to end

FIXED = "def f{i}(x):\n    return x * {i}\n"


def _bench_repo(tmp_path: Path) -> tuple[Path, list[Any]]:
    """Two planted bugs, each fixed with its test by a commit of its own; their tasks."""
    from conftest import git

    from hero.evals.tasks import Task

    repo = tmp_path / "user-repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "pkg" / "__init__.py").write_text("")
    (repo / "tests" / "__init__.py").write_text("")
    (repo / "tests" / "test_base.py").write_text("def test_ok():\n    assert 1 + 1 == 2\n")
    for i in (1, 2):
        (repo / "pkg" / f"m{i}.py").write_text(f"def f{i}(x):\n    return x + {i}\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "initial")
    tasks = []
    for i in (1, 2):
        base = git(repo, "rev-parse", "HEAD").strip()
        (repo / "pkg" / f"m{i}.py").write_text(FIXED.format(i=i))
        (repo / "tests" / f"test_m{i}.py").write_text(
            f"from pkg.m{i} import f{i}\n\n\ndef test_fixed():\n    assert f{i}(3) == 3 * {i}\n"
        )
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"fix f{i}")
        tasks.append(
            Task(
                instance_id=f"repo__m{i}",
                repo="local/repo",
                base_commit=base,
                patch=git(repo, "diff", base, "HEAD", "--", f"pkg/m{i}.py"),
                test_patch=git(repo, "diff", base, "HEAD", "--", f"tests/test_m{i}.py"),
                problem_statement=f"TASK-m{i}: f{i}(x) must return x * {i}, not x + {i}.",
                FAIL_TO_PASS=[f"tests/test_m{i}.py::test_fixed"],
                PASS_TO_PASS=["tests/test_base.py::test_ok"],
            )
        )
    return repo, tasks


def _worker(body: dict[str, Any]) -> Any:
    """The reviewer approves; the ``fixer`` worker writes the fix, ``idle`` nothing."""
    from helpers import is_review, step_of, task_text, verdict

    from hero.llm.scripted import call, text

    if is_review(body):
        return verdict()
    i = int(re.search(r"TASK-m(\d+)", task_text(body)).group(1))  # type: ignore[union-attr]
    plan = []
    if body["model"] == "fixer":
        plan = [
            call("write_file", path=f"pkg/m{i}.py", content=FIXED.format(i=i)),
            call("bash", command="git add -A && git commit -q -m fix"),
        ]
    step = step_of(body)
    return plan[step] if step < len(plan) else text("Done.")


@pytest.mark.slow
def test_a_real_bench_run_is_served_by_hero_serve(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import shlex
    import subprocess
    import sys
    import urllib.request

    from serve_support import url_from

    from hero.evals.tasks import write_tasks
    from hero.llm.scripted import ScriptedModel

    repo, tasks = _bench_repo(tmp_path)
    tasks_file = tmp_path / "tasks.jsonl"
    write_tasks(tasks_file, tasks)
    model = ScriptedModel(_worker).start()
    try:
        where = tmp_path / "home"
        (where / "config" / "providers").mkdir(parents=True)
        (where / "config" / "providers" / "scripted.yaml").write_text(
            f"name: scripted\nbase_url: {model.base_url}\ndefault_model: scripted-test\n"
        )
        (where / "config" / "roles.yaml").write_text(
            f"target_repo: {json.dumps(str(repo))}\nmax_retries: 1\nllm_backoff_base_s: 0.01\n"
            "worker:\n  provider: scripted\nreviewer:\n  provider: scripted\n"
        )
        args = ["bench", "run", str(tasks_file), "--home", str(where)]
        args += ["--out", str(tmp_path / "my run"), "--test-command"]
        args += [f"{shlex.quote(sys.executable)} -m pytest"]
        for name in ("fixer", "idle"):
            (tmp_path / f"{name}.yaml").write_text(f"worker:\n  model: {name}\n")
            args += ["-c", f"{name}={tmp_path / f'{name}.yaml'}"]
        assert main(args) == 0, capsys.readouterr().err
    finally:
        model.stop()
    capsys.readouterr()
    (recorded,) = read_folders(where).folders
    assert (recorded.name, recorded.path) == ("my-run", str(tmp_path / "my run"))
    assert recorded.configurations == ("fixer", "idle") and recorded.first <= recorded.last
    expected = cli_json(tmp_path / "my run", capsys)
    assert [c["resolved"] for c in expected["configurations"]] == [2, 0]

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    argv = [sys.executable, "-m", "hero", "serve", "--home", str(where), "--bind", "127.0.0.1:0"]
    proc = subprocess.Popen(
        argv, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env
    )
    lines: list[str] = []
    try:
        url = url_from(proc, lines)

        def get(path: str) -> bytes:
            with urllib.request.urlopen(url + path, timeout=60) as r:
                assert r.status == 200
                body: bytes = r.read()
                return body

        assert b'href="/bench/my-run"' in get("/bench")
        page = inert(get("/bench/my-run").decode())
        assert "100.0%" in page.all_text and "0.0%" in page.all_text
        assert "only fixer (vs idle, 2): repo__m1, repo__m2" in page.all_text
        assert json.loads(get("/api/bench/my-run")) == expected
        assert json.loads(get("/api/bench"))["folders"][0]["name"] == "my-run"
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def test_the_api_answers_304_while_nothing_changed(home: Path, out: Path) -> None:
    c = client(home)
    for url in ("/api/bench", "/api/bench/bench-out"):
        etag = c.get(url).headers["etag"]
        assert c.get(url, headers={"If-None-Match": etag}).status_code == 304
    etag = c.get("/api/bench").headers["etag"]
    os.rename(out, out.with_name("moved"))  # the list says so at once
    changed = c.get("/api/bench", headers={"If-None-Match": etag})
    assert changed.status_code == 200
    assert "no longer exists" in changed.json()["folders"][0]["problem"]


def test_swebench_reports_beside_and_big_predictions_are_not_read(home: Path, out: Path) -> None:
    harness = {"resolved_ids": TASKS[:6], "unresolved_ids": TASKS[6:]}
    (out / "gpt-x.run1.json").write_text(json.dumps(harness))
    (out / "predictions-A.jsonl").write_text("{}\n" * 10)
    c = client(home)
    r = c.get("/bench/bench-out")
    page = inert(r.text)
    rows = {row[0]: row for row in cells(r.text, "bench-report")}
    assert rows["swebench:gpt-x.run1"][3:5] == ["6", "60.0%"]
    assert rows["swebench:gpt-x.run1"][6:8] == ["-", "-"]
    assert "cost unknown" in page.all_text and "60.0% (31.3% - 83.2%)" in page.all_text
    assert len(c.get("/api/bench/bench-out").json()["comparisons"]) == 3
