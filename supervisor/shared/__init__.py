"""What more than one of the project's processes runs: the supervisor, its workers, the facade and client
stubs.

The boot conventions between a keeper and its worker, ZeroMQ sockets under trio, process helpers,
tool names, tool schema checks, MCP content items as text, OpenTelemetry tracing, rate-limited log
lines, default paths and HTTP listen addresses. Nothing here imports the daemon, the workers, the
client stubs or the CLI.
"""
