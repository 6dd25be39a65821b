"""mcp-supervisor: every MCP server in its own supervised worker process, one tool registry over ZeroMQ."""

__version__ = "0.1.0"
