"""The ``mcp-supervisor`` command: its arguments, its subcommands, how they print and exit.

Modules: ``main`` (the entry point: the top-level parser, ``run``, failures made exit codes),
``arguments`` (the arguments of the commands below, whose modules load when they run),
``registry_commands`` (tools, call, resources, resource-templates, read, prompts, prompt),
``watch_commands`` (wait, status, events, logs), ``control_commands`` (restart, stop, start,
reload, shutdown), ``keygen``, ``login`` (login, logout), ``facade_commands`` (mcp, serve,
host-config, with their arguments), ``output`` (JSON, tables, text safe for a terminal) and
``exit_codes``.
"""
