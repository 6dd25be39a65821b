"""One worker process per MCP server: it owns that server's session (through the MCP SDK), serves the
supervisor's calls over the worker link, and exits with its supervisor. It imports the wire protocol,
``supervisor.shared``, ``supervisor.security`` and ``supervisor.config``'s data model, never the daemon.
"""
