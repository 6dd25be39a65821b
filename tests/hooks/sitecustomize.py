"""Counts the span objects a process makes, for ``tests/e2e/test_tracing_sampling.py``.

With this directory on ``PYTHONPATH`` and ``MCPS_SPAN_HOOK`` naming a file, every Python process started
so (the supervisor, its zygote, and so every worker forked from it) appends a line ``PID CLASS`` to
that file for each span object it makes: the supervisor's and the worker's own
(``supervisor.shared.spans.Span``), the OpenTelemetry SDK's (``ReadableSpan``, and ``_Span``, its
recording span) and the API's ``NonRecordingSpan``. Each line is one ``write`` to a file opened with
``O_APPEND``: whole lines, from every process at once. Without ``MCPS_SPAN_HOOK`` it does nothing.
"""

from __future__ import annotations

import os
from typing import Any

_PATH = os.environ.get("MCPS_SPAN_HOOK", "")


def _counted(cls: type) -> None:
    original = cls.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        line = f"{os.getpid()} {type(self).__name__}\n".encode()
        fd = os.open(_PATH, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
        original(self, *args, **kwargs)

    cls.__init__ = __init__  # type: ignore[misc]


if _PATH:
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.trace import NonRecordingSpan

    from supervisor.shared.spans import Span

    for _cls in (Span, ReadableSpan, NonRecordingSpan):
        _counted(_cls)
