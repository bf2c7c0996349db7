"""MCP servers as the worker's tools: the round's servers (``servers``) over hero's own
bounded transports (``transport``), with the official MCP Python SDK as the client. Imported
only when a home declares ``mcp_servers``: the SDK is not on the path of ``hero --help``."""
