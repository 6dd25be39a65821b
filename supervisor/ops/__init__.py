"""Operating the supervisor: Prometheus metrics and the status page (``metrics/``, ``web/``), and systemd."""
