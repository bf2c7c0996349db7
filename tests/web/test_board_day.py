"""The board for a day's work (issue 37): totals equal the sum of the run records' usage,
filters from the query string, links to branch / pull request / issue, plans in
dependency order, charts drawn server-side, coloured diffs. Real run records in a real
home, read by the real app (Starlette's TestClient) and by hero.web.overview."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from board_support import GH_REPO, NOW, STORIES, record, usage_of, write_day
from conftest import git
from serve_support import Page

from hero.llm.scripted import ScriptedModel

pytest.importorskip("starlette", reason="the serve extra is not installed")
pytest.importorskip("httpx", reason="Starlette's TestClient needs httpx")

from starlette.testclient import TestClient

from hero.redact import Redactor
from hero.web import data, overview
from hero.web.app import create_app
from hero.web.data import Site


@pytest.fixture
def day(make_home: Any, scripted: Callable[..., ScriptedModel]) -> tuple[Path, TestClient]:
    home = make_home(scripted([]), max_story_tokens=5000, max_story_cost_usd=1.5)
    write_day(home)
    client = TestClient(create_app(home, token=None), base_url="http://127.0.0.1")
    return home, client


def _rows(page: str) -> list[str]:
    return re.findall(r'<tr class="story" data-key="([^"]+)">', page)


def test_the_totals_equal_the_sum_of_the_records_usage(day: tuple[Path, TestClient]) -> None:
    home, client = day
    site = Site(home, None, Redactor(()))
    view = overview.view(data.board(site), home, {}, now=NOW)
    t = view["totals"]
    every = [usage_of(s) for s in STORIES]
    assert t["all"] == {
        "tokens": sum(n for n, _ in every),
        "cost_usd": sum(c for _, c in every),
        "stories": len(STORIES),
    }
    # today (Thursday 00:00 UTC on): three; this week (from Monday): four; not the month-old
    today = ["login-form", "login-rate", "gh-42"]
    week = [*today, "report-csv"]
    assert t["today"]["tokens"] == sum(usage_of(s)[0] for s in today) == 5200
    assert t["today"]["cost_usd"] == pytest.approx(sum(usage_of(s)[1] for s in today))
    assert t["week"]["tokens"] == sum(usage_of(s)[0] for s in week) == 7500
    assert t["week"]["cost_usd"] == pytest.approx(1.625)
    by_model = {m["model"]: (m["tokens"], m["cost_usd"], m["stories"]) for m in t["per_model"]}
    assert by_model == {"model-a": (4000, 0.875, 3), "model-b": (9500, 2.75, 2)}
    per_story = {s["key"]: s for s in t["per_story"]}
    for story_id in STORIES:
        assert (per_story[story_id]["tokens"], per_story[story_id]["cost_usd"]) == usage_of(
            story_id
        )
    # the budgets of config/roles.yaml, less what each story spent
    assert per_story["login-form"]["left"] == ["3,800 tokens", "$1.25"]
    assert per_story["old-story"]["left"] == ["0 tokens", "$0.00"]

    page = client.get("/").text
    text = Page(page).all_text
    assert "13.5k tokens" in text or "13,500 tokens" in text or "13500" in text, text[:2000]
    assert "$3.62" in text or "$3.63" in text or "$3.625" in text, text[:2000]
    assert "model-a" in text and "model-b" in text
    assert "3,800 tokens · $1.25" in text


def test_filters_by_status_plan_and_text_without_javascript(
    day: tuple[Path, TestClient],
) -> None:
    _, client = day
    assert sorted(_rows(client.get("/").text)) == sorted(STORIES)
    assert sorted(_rows(client.get("/?status=passed").text)) == ["gh-42", "login-form", "old-story"]
    assert sorted(_rows(client.get("/?q=LOGIN").text)) == ["login-form", "login-rate"]
    assert _rows(client.get("/?status=passed&q=login").text) == ["login-form"]
    assert _rows(client.get("/?q=gh-4").text) == ["gh-42"]  # ids too
    assert _rows(client.get("/?plan=pl").text) == []  # the plan has not run
    none = client.get("/?q=%3Cscript%3Ealert(1)%3C/script%3E")
    assert none.status_code == 200 and _rows(none.text) == []
    assert "No story matches." in none.text
    assert "<script>alert(1)" not in none.text and "&lt;script&gt;alert(1)" in none.text
    # each filter is its own version of the page: no answer made for one is given for another
    assert client.get("/?status=gave_up").headers["etag"] != client.get("/").headers["etag"]
    selected = client.get("/?status=gave_up").text
    assert "<option selected>gave_up</option>" in selected


def test_filters_by_label_in_the_page_and_in_the_api(day: tuple[Path, TestClient]) -> None:
    _, client = day
    assert sorted(_rows(client.get("/?label=auth").text)) == ["login-form", "login-rate"]
    assert _rows(client.get("/?label=AUTH&status=passed").text) == ["login-form"]  # any case
    assert _rows(client.get("/?label=needs+design+review").text) == ["login-rate"]
    assert _rows(client.get("/?label=auth&q=rate").text) == ["login-rate"]
    assert _rows(client.get("/?label=nobody").text) == []
    page = client.get("/?label=bug").text
    assert _rows(page) == ["gh-42"] and "<option selected>bug</option>" in page
    # the form offers every label once; each row shows its labels, each a link to its filter
    form = re.search(r'<select name="label">(.*?)</select>', page, re.S)
    assert form and re.findall(r"<option[^>]*>([^<]+)</option>", form.group(1)) == [
        "any", "auth", "bug", "needs design review", "ui",
    ]  # fmt: skip
    row = re.search(
        r'<tr class="story" data-key="login-rate">(.*?)</tr>', client.get("/").text, re.S
    )
    assert row and re.findall(r'<a class="label" href="([^"]+)">([^<]+)</a>', row.group(1)) == [
        ("/?label=auth", "auth"),
        ("/?label=needs%20design%20review", "needs design review"),
    ]

    api = client.get("/api/stories?label=Auth&status=passed").json()
    assert [s["key"] for s in api["stories"]] == ["login-form"]
    assert [g["stories"][0]["key"] for g in api["groups"]] == ["login-form"]
    assert api["filters"] == {"status": "passed", "plan": "", "label": "Auth", "q": ""}
    assert api["stories"][0]["labels"] == ["ui", "auth"]
    everything = client.get("/api/stories").json()
    assert len(everything["stories"]) == len(STORIES)
    assert (
        client.get("/api/stories?label=ui").headers["etag"]
        != client.get("/api/stories").headers["etag"]
    )
    assert client.get("/api/stories/login-form").json()["labels"] == ["ui", "auth"]
    story = client.get("/stories/login-form").text
    labels = re.search(r'<p class="labels" id="story-labels">(.*?)</p>', story, re.S)
    assert labels and re.findall(r'<a class="label" href="[^"]+">([^<]+)</a>', labels.group(1)) == [
        "ui",
        "auth",
    ]
    assert 'id="story-labels"' not in client.get("/stories/report-csv").text


def test_each_story_links_its_branch_pull_request_and_issue(
    day: tuple[Path, TestClient],
) -> None:
    _, client = day
    page = client.get("/").text
    row = re.search(r'<tr class="story" data-key="gh-42">(.*?)</tr>', page, re.S)
    assert row
    hrefs = dict(re.findall(r'<a class="(\w+)" href="([^"]+)"', row.group(1)))
    base = f"https://github.com/{GH_REPO}"
    assert hrefs["issue"] == f"{base}/issues/42"
    assert hrefs["branch"] == f"{base}/tree/hero/gh-42"
    assert hrefs["pull"].startswith(f"{base}/pulls?q=") and "hero%2Fgh-42" in hrefs["pull"]
    other = re.search(r'<tr class="story" data-key="login-form">(.*?)</tr>', page, re.S)
    assert other and "<a class=" not in other.group(1).split('class="links"')[1]
    assert '<code class="branch">hero/login-form</code>' in other.group(1)


def test_the_pull_request_the_report_back_recorded_is_linked_itself(
    day: tuple[Path, TestClient],
) -> None:
    home, client = day
    etag = client.get("/").headers["etag"]
    reported = home / "runs" / "github" / "reported.json"
    reported.parent.mkdir(parents=True, exist_ok=True)
    pull = f"https://github.com/{GH_REPO}/pull/7"
    reported.write_text(json.dumps({"done": {}, "pulls": {"gh-42": pull}}))
    response = client.get("/", headers={"if-none-match": etag})
    assert response.status_code == 200  # the record changed the page
    row = re.search(r'<tr class="story" data-key="gh-42">(.*?)</tr>', response.text, re.S)
    assert row
    hrefs = dict(re.findall(r'<a class="(\w+)" href="([^"]+)"', row.group(1)))
    assert hrefs["pull"] == pull


def test_a_hostile_source_makes_no_link() -> None:
    row = {"branch": "x"}
    assert overview.links(row, {"repo": "javascript:alert(1)//x", "issue": 1}) == {}
    bad = overview.links(row, {"repo": "a/b", "url": "javascript:alert(1)", "issue": True})
    assert "issue" not in bad and bad["branch"] == "https://github.com/a/b/tree/x"
    for pull in (
        "javascript:alert(1)",
        "https://github.com/other/repo/pull/1",
        'https://github.com/a/b/pull/1"><script>',
    ):
        assert overview.links(row, {"repo": "a/b"}, pull)["pull"].startswith(
            "https://github.com/a/b/pulls?q="
        )
    assert overview.links(row, {"repo": "a/b"}, "https://github.com/a/b/pull/3")["pull"] == (
        "https://github.com/a/b/pull/3"
    )


def test_a_plan_lists_its_stories_in_dependency_order(day: tuple[Path, TestClient]) -> None:
    _, client = day
    page = client.get("/plans/pl").text
    assert _rows(page) == ["pl/c", "pl/b", "pl/a"]
    assert "<svg" in page  # its diagram
    api = client.get("/api/plans/pl").json()
    assert [s["id"] for s in api["stories"]] == ["c", "b", "a"]


def test_dependency_order_ties_by_id_and_puts_a_cycle_last() -> None:
    deps = {"z": [], "y": ["z"], "a": [], "m": ["a", "z"], "q": ["r"], "r": ["q"]}
    assert overview.dependency_order(deps) == ["a", "z", "m", "y", "q", "r"]


def test_charts_are_inline_svg_escaped_and_say_when_there_is_nothing() -> None:
    empty = overview.charts([], now=NOW)
    assert all(overview.NO_DATA in c and "<svg" not in c for c in empty.values()), empty
    rows = [
        {"key": "a", "status": "passed", "finished_at": NOW - 60, "updated_at": NOW - 60},
        {"key": "b", "status": "gave_up", "finished_at": NOW - 7200, "cost_usd": 1.5},
    ]
    found = overview.charts(rows, now=NOW)
    assert found["per_hour"].count("<rect") == 2 and "<svg" in found["per_hour"]
    assert "http" not in found["per_hour"].replace("http://www.w3.org/2000/svg", "")
    hostile = overview.bar_chart("<b>x</b>", [("<i>", [1.0])], ["<s>"], str)
    assert "<b>" not in hostile and "<i>" not in hostile and "&lt;b&gt;" in hostile
    assert "time per round: no data yet" in overview.round_chart([])
    # of many axis labels, every other one may be left out of a narrow chart; of a few, none
    few = overview.round_chart([{"round": n, "duration_s": 60.0} for n in (1, 2, 3)])
    many = overview.round_chart([{"round": n, "duration_s": 60.0} for n in range(1, 15)])
    assert 'class="axis alt"' not in few and ">r3</text>" in few
    assert many.count('class="axis alt"') == 7 and many.count('class="axis"') == 8


def test_the_board_shows_its_charts(day: tuple[Path, TestClient]) -> None:
    _, client = day
    page = client.get("/").text
    assert 'id="charts"' in page
    assert page.count('<figure class="board-chart">') + page.count("no data yet") >= 2


def test_a_diff_is_coloured_with_a_file_list() -> None:
    text = "diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-old\n+new\n ctx\n"
    text += "diff --git a/<y>.md b/<y>.md\n"
    found = overview.diff_view(text)
    assert [f["name"] for f in found["files"]] == ["x.py", "<y>.md"]
    kinds = [line["kind"] for line in found["lines"]]
    assert kinds == ["file", "file", "file", "hunk", "del", "add", "", "file"]
    assert found["lines"][0]["anchor"] == found["files"][0]["anchor"] == "file-1"


def test_a_round_that_changed_nothing_says_so(
    day: tuple[Path, TestClient], target_repo: Path
) -> None:
    home, _ = day
    head = git(target_repo, "rev-parse", "HEAD").strip()
    found = record("report-csv", base_sha=head, head_sha=head)
    for r in found["rounds"]:
        r["head_sha"] = head
    (home / "runs" / "state" / "report-csv.json").write_text(json.dumps(found))
    app = create_app(home, token=None, repo=target_repo)
    page = TestClient(app, base_url="http://127.0.0.1").get("/stories/report-csv").text
    assert page.count(f"no change: the round ended on <code>{head[:12]}</code>") == 2
    assert '<pre class="text stat"></pre>' not in page


def test_api_stories_is_unchanged_by_the_board_view(day: tuple[Path, TestClient]) -> None:
    _, client = day
    body = client.get("/api/stories").json()
    assert "totals" not in body and json.dumps(body)
