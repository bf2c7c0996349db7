"""What the MCP tests share: the test server (written with the SDK's server side), started on
streamable HTTP, or committed in the target repository for a stdio server; a home's
``mcp_servers``."""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from conftest import git

SERVER = Path(__file__).parent / "agent" / "mcp" / "mcp_test_server.py"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def http_server(log_dir: Path) -> Iterator[str]:
    """The test server on streamable HTTP on the loopback, for the block; its URL."""
    port = free_port()
    log_path = log_dir / "http-server.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [sys.executable, str(SERVER), "http", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            for _ in range(600):  # until it listens ("did not start" bound, not a speed check)
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    assert proc.poll() is None, log_path.read_text()
                    time.sleep(0.1)
            yield f"http://127.0.0.1:{port}/mcp"
        finally:
            proc.kill()
            proc.wait()


def with_server(target_repo: Path) -> None:
    """The test server committed in the target repository: the story's repository has it,
    inside the sandbox too."""
    shutil.copy(SERVER, target_repo / "mcp_test_server.py")
    git(target_repo, "add", "mcp_test_server.py")
    git(target_repo, "commit", "-q", "-m", "mcp test server")


def add_servers(home: Path, servers: object, local: object = None) -> None:
    """``mcp_servers`` in the home's config/roles.yaml (and ``local`` in config.local.yaml)."""
    roles = home / "config" / "roles.yaml"
    roles.write_text(roles.read_text() + "mcp_servers: " + json.dumps(servers) + "\n")
    if local is not None:
        (home / "config.local.yaml").write_text("mcp_servers: " + json.dumps(local) + "\n")


def stdio(**more: Any) -> dict[str, Any]:
    """A stdio server running the test server from the story's repository."""
    return {"command": [sys.executable, "mcp_test_server.py"], **more}
