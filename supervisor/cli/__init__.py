"""The ``mcp-supervisor`` command: its arguments, its subcommands, how they print and exit."""
