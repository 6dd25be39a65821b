"""The MCP facade: the supervisor's registry served as one MCP server, for any MCP host.

``mcp-supervisor mcp`` serves it over stdio (a host starts it as one of its MCP servers);
``mcp-supervisor serve --http HOST:PORT`` over streamable HTTP. Modules: ``server`` (the MCP server
and who hears of what), ``served_tools`` (the tools: listings, how calls map, the search tools),
``resources`` (resources and prompts), ``views`` (which tools a facade shows, and the registry
search), ``upstream`` (the link to the supervisor, and reconnection), ``launch`` (starting a
supervisor when none answers), ``run`` (the transports), ``handshake`` (the stdio host's first
request, answered before the SDK is loaded), ``hosts`` (config entries for MCP hosts).
"""
