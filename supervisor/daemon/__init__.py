"""The supervisor process: its life, its front door, the router and call table, the worker link, the
registry, the events it publishes, and reloads. ``servers/`` holds what runs each configured server.
"""
