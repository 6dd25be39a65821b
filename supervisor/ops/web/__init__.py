"""The supervisor's HTTP listener: Prometheus metrics and a live console (``"metrics": "HOST:PORT"``).

Modules: ``http`` (a small bounded HTTP/1.1 server on h11, in the supervisor's trio loop), ``feed``
(the page's Server-Sent Events: bounded queues, slow clients dropped), ``app`` (the paths: the page
and its files, ``/metrics``, the ``/api/`` JSON, ``/events``, the control POSTs), ``query`` (their
query strings, read strictly), ``timeline`` (what happened to the servers lately), ``detail`` (one
server's status, tools and log), ``site`` (all of it put together around one ``Supervisor``: what the
daemon binds and starts). The page itself is package data: ``page.html``, ``page.css``, ``page.js``,
``views.js``. The figures are ``supervisor.ops.metrics``'s; which ``Host`` headers name the listener,
``supervisor.shared.address``'s.

This package's ``__init__`` imports nothing: the config loader reads ``address`` without loading the
server.
"""
