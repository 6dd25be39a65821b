"""The client library agents import: the blocking and async client stubs, their errors, event watches
and the live tool cache. It needs pyzmq, msgspec and anyio, and imports neither the daemon, the workers
nor the config.
"""
