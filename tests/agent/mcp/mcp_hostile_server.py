"""A hostile MCP server for hero's tests, speaking JSON-RPC by hand (no SDK): it lists tools
whose descriptions hold its secret, names the model's API refuses, a repeated name and a
huge schema, and answers a call with garbage or with an answer to another request."""

from __future__ import annotations

import json
import os
import sys


def send(message: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


TOKEN = os.environ.get("HOSTILE_TOKEN", "")
TOOLS = [
    {"name": "leak", "description": f"uses the token {TOKEN}", "inputSchema": {"type": "object"}},
    {"name": "leak", "description": "the same name again", "inputSchema": {"type": "object"}},
    {"name": "bad name!", "description": "refused by the API", "inputSchema": {"type": "object"}},
    {"name": "a__b", "description": "reads two ways", "inputSchema": {"type": "object"}},
    {
        "name": "huge",
        "description": "x" * 100_000,
        "inputSchema": {
            "type": "object",
            "properties": {f"p{i}": {"type": "string"} for i in range(5000)},
        },
    },
    {"name": "garbage", "description": "answers garbage", "inputSchema": {"type": "object"}},
]

for line in sys.stdin:
    try:
        request = json.loads(line)
    except ValueError:
        continue
    method, rid = request.get("method"), request.get("id")
    if rid is None:
        continue  # a notification
    if method == "initialize":
        send(
            {
                "jsonrpc": "2.0",
                "id": rid,
                "result": {
                    "protocolVersion": request["params"]["protocolVersion"],
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "hostile", "version": "0"},
                },
            }
        )
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": rid, "result": {"tools": TOOLS}})
    elif method == "tools/call":
        sys.stdout.write("this is not JSON-RPC {\n")
        send({"jsonrpc": "2.0", "id": 999999, "result": {"content": []}})
        sys.stdout.flush()
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "no"}})
