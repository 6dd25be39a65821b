"""What the end of a worker incarnation tells: how it ended, and what its calls in flight are told.

Above: the keeper of that worker, at the end of each incarnation (after it is reaped), which keeps
the reason as the server's last error when the worker ended on its own, and fails the calls with
it. Below: ``supervisor.shared.boot.Ended`` (what the worker's exit status and last word say).
"""

from __future__ import annotations

from dataclasses import dataclass

from supervisor.protocol import ErrorCode
from supervisor.shared.boot import Ended, Outcome

__all__ = ["Ending", "ending_of"]


@dataclass(frozen=True, slots=True)
class Ending:
    outcome: Outcome
    reason: str  # why, for the calls it had (and the last error, when ``own``)
    code: ErrorCode  # what its calls in flight fail with
    own: bool  # the worker ended on its own (not an operator's stop, not the shutdown): a failure to tell


def ending_of(ended: Ended, on_its_own: bool, ending: Outcome, report: str, why: str) -> Ending:
    """The end of an incarnation that ``ended`` so. ``on_its_own``: nobody was ending it; else
    ``ending`` says who was. ``report``: its last stderr lines ('' when none); ``why``: what an
    operator's stop told its calls."""
    outcome = ended.outcome if on_its_own else ending
    reason = f"{ended.reason}; last stderr: {report}" if report else ended.reason
    # A remote server's session breaking is the server's failure, not the worker's.
    lost = ended.connection_lost and on_its_own
    own = outcome in ("normal", "abnormal", "needs-login")
    if outcome == "shutdown":
        reason = "the supervisor is stopping"
    elif not own:
        reason = why
    code: ErrorCode = (
        "UNAVAILABLE" if outcome == "needs-login" else "SERVER_ERROR" if lost else "WORKER_CRASHED"
    )
    return Ending(outcome, reason, code, own)
