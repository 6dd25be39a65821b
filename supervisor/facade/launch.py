"""Starting a supervisor for the facade (``mcp-supervisor mcp --config FILE``) when none answers.

Above: the facade's link (``supervisor.facade.upstream``), which asks ``ensure_running`` each time
it fails to reach a supervisor. Below: ``mcp-supervisor run FILE`` as a process of its own.

The supervisor is started in a session of its own (``setsid``), with its output in a log file, so it
outlives the facade: a host that restarts its MCP servers (and so the facade) does not restart every
server behind it. A second facade that starts one at the same moment is harmless: the endpoint is
claimed by one supervisor, and the other exits saying so.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from pathlib import Path
from typing import Final

__all__ = ["Launcher"]

log = logging.getLogger("mcp_supervisor.facade")

RELAUNCH_INTERVAL: Final = 10.0  # seconds between starts when the one started before has exited


class Launcher:
    """Starts ``mcp-supervisor run CONFIG`` in the background; ``ensure_running`` says what it is doing."""

    def __init__(
        self, config: Path, *, endpoint: str | None, keys: str | None, log_path: Path, insecure: bool = False
    ) -> None:
        self.config = config.resolve()
        self.endpoint = endpoint
        self.keys = keys
        self.log_path = log_path
        self.insecure = insecure
        self._process: subprocess.Popen[bytes] | None = None
        self._started_at = -RELAUNCH_INTERVAL
        self.gave_up = False  # the supervisor started last has exited: it is not coming up by itself

    def argv(self) -> list[str]:
        argv = [sys.executable, "-m", "supervisor", "run", str(self.config)]
        if self.endpoint:
            argv += ["--endpoint", self.endpoint]
        if self.keys:
            argv += ["--keys", self.keys]
        if self.insecure:
            argv.append("--insecure")
        return argv

    def ensure_running(self) -> str:
        """Start a supervisor unless the one started before is still coming up; what it is doing."""
        process = self._process
        if process is not None:
            code = process.poll()
            if code is None:
                return f"waiting for the supervisor started for {self.config} (pid {process.pid})"
            self._process = None
            self.gave_up = True
            log.error(
                "the supervisor started for %s exited with %s; see %s", self.config, code, self.log_path
            )
        if time.monotonic() - self._started_at < RELAUNCH_INTERVAL:
            return f"the supervisor started for {self.config} exited; see {self.log_path}"
        self._started_at = time.monotonic()
        self.log_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with self.log_path.open("ab") as out:
            self._process = subprocess.Popen(
                self.argv(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                start_new_session=True,  # not in the host's process group: it outlives the facade
            )
        log.info(
            "started a supervisor for %s (pid %d, log %s)", self.config, self._process.pid, self.log_path
        )
        return f"started a supervisor for {self.config} (pid {self._process.pid}, log {self.log_path})"
