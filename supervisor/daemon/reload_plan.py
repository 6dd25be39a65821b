"""What a config reload changes, as pure code: the running config against the file as it is now.

Above: ``Supervisor.reload`` (on ``mcp-supervisor reload`` or SIGHUP), which
applies a plan. Below: ``supervisor.config.load``, whose ``Config`` both sides are.

A server whose ``ServerSpec`` differs in anything (command, env, policy, the
default policy it inherits, ``disabled`` ...) is *changed*; one that is
identical is *unchanged* and its worker is never touched. A new file with any
problem (an entry the loader would skip) is rejected as a whole, so a typo
never stops a running server.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from supervisor.config.load import Config
from supervisor.protocol import ReloadSummary

__all__ = ["ReloadPlan", "ReloadRejected", "plan_reload"]


class ReloadRejected(Exception):
    """The new config cannot be applied; nothing was changed. The message says why (one problem a line)."""


@dataclass(frozen=True)
class ReloadPlan:
    """Server names by what a reload does to them (each list in file order), and what else changed."""

    added: list[str]  # start
    removed: list[str]  # stop, as ``stop NAME`` does, and forget
    changed: list[str]  # restart with the new spec (stop if now disabled)
    unchanged: list[str]  # left alone
    settings: list[str]  # top-level "supervisor" keys whose value changed, as spelled in the file
    problems: list[str]  # why the new file cannot be applied; not empty: reject the reload

    def summary(self, config: str = "") -> ReloadSummary:
        return ReloadSummary(
            config=config,
            added=self.added,
            removed=self.removed,
            changed=self.changed,
            unchanged=self.unchanged,
            settings=self.settings,
        )


def plan_reload(old: Config, new: Config) -> ReloadPlan:
    """Compare the running config with a freshly loaded one."""
    added = [name for name in new.servers if name not in old.servers]
    removed = [name for name in old.servers if name not in new.servers]
    common = [name for name in new.servers if name in old.servers]
    changed = [name for name in common if new.servers[name] != old.servers[name]]
    unchanged = [name for name in common if new.servers[name] == old.servers[name]]
    settings = _changed_keys(old.settings, new.settings) + _changed_keys(old.defaults, new.defaults)
    problems = [problem.message for problem in new.problems]
    return ReloadPlan(added, removed, changed, unchanged, settings, problems)


def _changed_keys(old: msgspec.Struct, new: msgspec.Struct) -> list[str]:
    return [
        info.encode_name
        for info in msgspec.structs.fields(old)
        if getattr(old, info.name) != getattr(new, info.name)
    ]
