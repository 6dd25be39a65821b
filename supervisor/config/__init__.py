"""The config file: the ``mcpServers`` JSON read and checked, its data model, and what each entry allows."""
