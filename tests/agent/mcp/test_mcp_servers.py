"""MCP servers' settings, the streamable-HTTP transport and `hero doctor`'s look at them: real
server processes (the SDK's server side), real HTTP on the loopback, real config files."""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from mcp_support import SERVER, add_servers, free_port, http_server

from hero.agent.mcp.servers import McpServers
from hero.config.loader import load_config
from hero.config.mcp import McpServer
from hero.config.schema import ConfigError, UnknownKeyError
from hero.doctor import FAIL, OK, run_all
from hero.llm.scripted import ScriptedModel
from hero.sandbox.bwrap import build
from hero.sandbox.limits import Limits

TOKEN = "mcp-header-7Gh2Kq9Lw4Zx1Vb6Nm3P"  # not a real token


@pytest.fixture
def http_url(tmp_path: Path) -> Iterator[str]:
    with http_server(tmp_path) as url:
        yield url


# --------------------------------------------------------------------------- the settings


def test_servers_load_with_their_secrets_from_config_local(
    scripted: Callable[..., ScriptedModel], make_home: Callable[..., Path]
) -> None:
    home = make_home(scripted([]))
    add_servers(
        home,
        {
            "docs": {"command": ["python3", "docs.py"], "env": {"DOCS": "docs"}, "network": True},
            "web": {"url": "https://mcp.example.com/mcp", "call_timeout_s": 5},
        },
        {"docs": {"env": {"DOCS_TOKEN": TOKEN}}, "web": {"headers": {"Authorization": TOKEN}}},
    )

    config = load_config(home)

    docs, web = config.mcp_servers
    assert docs == McpServer(
        "docs",
        command=("python3", "docs.py"),
        env=(("DOCS", "docs"), ("DOCS_TOKEN", TOKEN)),
        network=True,
    )
    assert web.url == "https://mcp.example.com/mcp" and web.call_timeout_s == 5.0
    assert dict(web.headers) == {"Authorization": TOKEN}
    assert TOKEN in config.secrets  # redacted from everything hero writes or sends
    assert TOKEN not in repr(config)


@pytest.mark.parametrize(
    ("servers", "local", "key", "words"),
    [
        ({"Bad Name": {"command": ["x"]}}, None, "mcp_servers.Bad Name", "lower-case"),
        ({"a__b": {"command": ["x"]}}, None, "mcp_servers.a__b", "without __"),
        ({"a": {}}, None, "mcp_servers.a", "exactly one of command"),
        ({"a": {"command": ["x"], "url": "http://h"}}, None, "mcp_servers.a", "both"),
        ({"a": {"command": "x y"}}, None, "mcp_servers.a.command", "a list"),
        ({"a": {"url": "ftp://h"}}, None, "mcp_servers.a.url", "http"),
        ({"a": {"command": ["x"], "comand": 1}}, None, "mcp_servers.a.comand", "unknown key"),
        ({"a": {"command": ["x"], "network": "yes"}}, None, "mcp_servers.a.network", "true"),
        ({"a": {"command": ["x"], "call_timeout_s": 0}}, None, "call_timeout_s", "> 0"),
        ({"a": {"url": "http://h", "network": True}}, None, "mcp_servers.a.network", "stdio"),
        ({"a": {"url": "http://h", "headers": {"X-Api-Key": "v"}}}, None, "X-Api-Key", "secret"),
        ({"a": {"command": ["x"]}}, {"b": {"env": {}}}, "mcp_servers.b", "no server"),
        ({"a": {"command": ["x"]}}, {"a": {"command": ["y"]}}, "mcp_servers.a.command", "unknown"),
    ],
)
def test_a_bad_server_is_an_error_naming_the_server_and_the_key(
    scripted: Callable[..., ScriptedModel],
    make_home: Callable[..., Path],
    servers: object,
    local: object,
    key: str,
    words: str,
) -> None:
    home = make_home(scripted([]))
    add_servers(home, servers, local)

    with pytest.raises(ConfigError) as caught:
        load_config(home)

    assert key in caught.value.key and words in caught.value.message, str(caught.value)
    assert caught.value.exit_code == 2


def test_a_secret_pasted_as_a_server_name_in_config_local_is_not_shown(
    scripted: Callable[..., ScriptedModel], make_home: Callable[..., Path]
) -> None:
    home = make_home(scripted([]))
    add_servers(home, {"docs": {"command": ["x"]}}, {TOKEN: {"env": {}}})

    with pytest.raises(UnknownKeyError) as caught:
        load_config(home)

    assert TOKEN not in str(caught.value) and "not shown" in caught.value.key


# --------------------------------------------------------------------------- streamable HTTP


@pytest.mark.slow
def test_an_http_server_on_the_loopback_gives_its_tools(http_url: str, tmp_path: Path) -> None:
    server = McpServer("web", url=http_url, headers=(("Authorization", f"Bearer {TOKEN}"),))

    with McpServers([server], cwd=tmp_path, env={}, sandbox=None) as running:
        running.start()
        tools = {t.name: t for t in running.tools}
        echoed = tools["web__echo"].call('{"text": "over http"}')
        header = tools["web__header"].call('{"name": "authorization"}')
        bad = tools["web__echo"].call("not json")
        big = tools["web__big"].call('{"megabytes": 10}')

    assert running.problems == {}
    assert echoed.content == "echo: over http" and not echoed.is_error
    assert header.content == f"authorization: Bearer {TOKEN}"  # sent (the loop redacts it)
    assert bad.is_error and "not JSON" in bad.content
    assert big.is_error and "larger than" in big.content and len(big.content) < 1000
    assert TOKEN not in json.dumps(running.report())


def test_a_server_that_is_not_there_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    servers = [
        McpServer("gone", url=f"http://127.0.0.1:{free_port()}/mcp", start_timeout_s=5),
        McpServer("nothing", command=(str(tmp_path / "no-such-program"),)),
    ]

    with McpServers(servers, cwd=tmp_path, env=dict(os.environ), sandbox=None) as running:
        running.start()

    assert running.tools == []
    assert set(running.problems) == {"gone", "nothing"}
    assert "could not be started" in running.problems["nothing"]


# --------------------------------------------------------------------------- the sandbox


@pytest.mark.slow
def test_a_sandboxed_server_is_held_by_the_sandboxs_limits(bwrap: str, tmp_path: Path) -> None:
    shutil.copy(SERVER, tmp_path / "mcp_test_server.py")
    box = build(tmp_path, None, bwrap=bwrap, limits=Limits(memory_mb=256))
    server = McpServer("t", command=(sys.executable, "mcp_test_server.py"))

    with McpServers([server], cwd=tmp_path, env=dict(os.environ), sandbox=box) as running:
        running.start()
        tools = {t.name: t for t in running.tools}
        small = tools["t__alloc"].call('{"megabytes": 8}')
        hog = tools["t__alloc"].call('{"megabytes": 512}')

    assert running.problems == {}
    assert small.content == "allocated 8 MB"
    assert "allocated" not in hog.content  # MemoryError, or the server killed: an error


# --------------------------------------------------------------------------- hero doctor


@pytest.mark.slow
def test_doctor_lists_a_servers_tools_and_reports_one_that_fails(
    scripted: Callable[..., ScriptedModel], make_home: Callable[..., Path], target_repo: Path
) -> None:
    shutil.copy(SERVER, target_repo / "mcp_test_server.py")
    home = make_home(scripted([]), sandbox="auto")
    add_servers(
        home,
        {
            "t": {"command": [sys.executable, "mcp_test_server.py"]},
            "broken": {"command": [sys.executable, "-c", "import sys; sys.exit('no luck')"]},
        },
    )

    found = {f.what: f for f in run_all(home, quick=True)}

    t, broken = found["MCP server t"], found["MCP server broken"]
    assert t.status == OK and "9 tools" in t.detail and "t__echo" in t.detail
    assert broken.status == FAIL and "no luck" in broken.detail
    assert "mcp_servers.broken" in broken.fix


# --------------------------------------------------------------------------- a hostile server

HOSTILE = Path(__file__).with_name("mcp_hostile_server.py")


def test_a_hostile_servers_tools_are_cleaned_and_its_garbage_is_a_tool_error(
    tmp_path: Path,
) -> None:
    server = McpServer(
        "evil",
        command=(sys.executable, str(HOSTILE)),
        env=(("HOSTILE_TOKEN", TOKEN),),
        call_timeout_s=2,
    )

    with McpServers(
        [server], cwd=tmp_path, env=dict(os.environ), sandbox=None, secrets=(TOKEN,)
    ) as running:
        running.start()
        tools = {t.name: t for t in running.tools}
        answer = tools["evil__garbage"].call("{}")

    assert running.problems == {}
    assert sorted(tools) == ["evil__garbage", "evil__huge", "evil__leak"]
    assert TOKEN not in json.dumps([t.schema() for t in tools.values()])
    assert tools["evil__leak"].description == "uses the token [redacted]"
    assert len(tools["evil__huge"].description) <= 2000
    assert tools["evil__huge"].parameters == {"type": "object"}
    assert answer.is_error and "evil" in answer.content
