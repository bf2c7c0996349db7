"""End to end: what a worker's command and a worker-written test find of hero's environment,
and whether the checks reach the network: no secret of hero's may leak to them, and no
network unless `verify_network` allows it.

Real `hero run` in-process against the scripted model over real HTTP, real git, real
bubblewrap; hero's environment holds a broker URL with a password, a GitHub token with a
trailing blank, and a variable whose value holds that token.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Callable, Iterator

import pytest
from conftest import working_bwrap
from helpers import PY, is_review, step_of, verdict

from hero.cli import main
from hero.llm.scripted import Reply, ScriptedModel, call, text

TOKEN = "ghp_e2eEnvironmentToken0123456789abcdef"
BROKER = "redis://:broker-pass-5a7c@127.0.0.1:6399/0"
#: What a worker-written test does: prints the environment and tries the network.
LEAK_TEST = """import os, sys, urllib.request
print("ENV-DUMP", sorted(os.environ.items()))
try:
    urllib.request.urlopen(sys.argv[1], timeout=3).read()
    print("NETWORK-REACHED")
except Exception as exc:
    print("NETWORK-REFUSED", type(exc).__name__)
"""


@pytest.fixture(scope="module", autouse=True)
def _bwrap_works() -> None:
    working_bwrap()


@pytest.fixture
def probe() -> Iterator[tuple[str, list[str]]]:
    """A loopback HTTP server that records every request path it gets."""
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.path)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *_args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/leak", seen
    finally:
        server.shutdown()
        server.server_close()


def policy(worker: list[Reply]) -> Callable[[dict], Reply]:
    def handler(body: dict) -> Reply:
        if is_review(body):
            return verdict()
        return worker[min(step_of(body), len(worker) - 1)]

    return handler


def tool_outputs(model: ScriptedModel) -> str:
    out: list[str] = []
    for r in model.requests:
        if not is_review(r.body):
            out = [str(m["content"]) for m in r.body["messages"] if m.get("role") == "tool"]
    return "\n".join(out)


@pytest.mark.slow
@pytest.mark.parametrize("network", [False, True], ids=["verify-network-off", "verify-network-on"])
def test_commands_and_checks_find_no_secret_and_no_network_by_default(
    scripted,
    make_home,
    write_story,
    probe: tuple[str, list[str]],
    monkeypatch: pytest.MonkeyPatch,
    network: bool,
) -> None:
    url, seen = probe
    monkeypatch.setenv("HERO_BROKER_URL", BROKER)
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN + " ")  # as a hand-edited env file has it
    monkeypatch.setenv("MY_CI_GIT", f"https://x-access-token:{TOKEN}@github.com/")
    monkeypatch.setenv("HARMLESS_SETTING", "kept")
    worker = [
        call("bash", command="env; echo ENV-DONE"),
        call("write_file", path="leak_test.py", content=LEAK_TEST),
        call("bash", command="git add -A && git commit -q -m leak-test"),
        text("Done."),
    ]
    model = scripted(policy(worker))
    knobs: dict[str, object] = {"sandbox": "bwrap", "pass_env": ["MY_CI_GIT", "HARMLESS_SETTING"]}
    if network:
        knobs["verify_network"] = True
    home = make_home(model, **knobs)
    story = write_story(home, "s1", verify=[f"{PY} leak_test.py {url}"], allow_empty=True)

    assert main(["run", str(story), "--home", str(home)]) == 0

    worker_env = tool_outputs(model)
    assert "ENV-DONE" in worker_env  # the command ran
    verify_log = (home / "runs" / "s1" / "verify-r1.log").read_text()
    assert "ENV-DUMP" in verify_log  # so did the worker's test, in the checks
    for seen_by in (worker_env, verify_log):
        assert "HERO_BROKER_URL" not in seen_by and "broker-pass" not in seen_by
        assert "GITHUB_TOKEN" not in seen_by and "MY_CI_GIT" not in seen_by
        assert TOKEN not in seen_by and TOKEN[::-1] not in seen_by
    assert "HARMLESS_SETTING=kept" in worker_env  # a name the user passes on, holding no secret
    if network:
        assert "NETWORK-REACHED" in verify_log and seen == ["/leak"]
    else:
        assert "NETWORK-REFUSED" in verify_log and seen == []


def test_pass_env_refuses_heros_own_names(make_home, scripted) -> None:
    model = scripted(policy([text("Done.")]))
    home = make_home(model, pass_env=["HERO_BROKER_URL"])
    story = home / "inbox" / "s1.md"
    story.write_text("---\nid: s1\ntitle: t\n---\n## Goal\nx\n")

    assert main(["run", str(story), "--home", str(home)]) == 2
    assert model.requests == []
