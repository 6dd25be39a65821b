"""One worker process per MCP server: it owns that server's session (its own MCP client for a stdio
server, the MCP SDK's for a remote one), serves the supervisor's calls over the worker link, and exits
with its supervisor. It imports the wire protocol,
``supervisor.shared``, ``supervisor.security`` and ``supervisor.config``'s data model, never the daemon.
"""
