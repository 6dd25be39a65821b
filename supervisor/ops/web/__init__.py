"""The supervisor's HTTP listener: Prometheus metrics and a live status page (``"metrics": "HOST:PORT"``).

Modules: ``address`` (the setting's ``HOST:PORT``, and which ``Host`` headers name the listener),
``server`` (a small bounded HTTP/1.1 server on h11, in the supervisor's trio loop), ``feed`` (the
page's Server-Sent Events: bounded queues, slow clients dropped), ``app`` (the paths: ``/``,
``/metrics``, ``/api/status``, ``/events``, the control POSTs), ``site`` (all of it put together
around one ``Supervisor``: what the daemon binds and starts). The figures themselves are
``supervisor.ops.metrics``'s.

This package's ``__init__`` imports nothing: the config loader reads ``address`` without loading the
server.
"""
