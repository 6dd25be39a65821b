"""What the blocking and the async federated clients share: their result types, how the members'
answers merge into one, who owns each tool and server, and the errors for a name nobody has.

Above: ``FederatedClient`` (``supervisor.client.federated``) and ``AsyncFederatedClient``
(``supervisor.client.aio_federated``), which only carry requests to their members. Below: the members
and the merging rule of ``supervisor.shared.federation``. Pure code: nothing here sends a request.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from supervisor.client.errors import SupervisorError, SupervisorUnreachableError, UnknownToolError
from supervisor.protocol import PromptInfo, ServerStatus, ToolInfo
from supervisor.shared.federation import Member, Merged, Owned, merge

__all__ = [
    "Clash",
    "Failure",
    "Listing",
    "Outcome",
    "Owners",
    "Row",
    "Status",
    "listing_of",
    "named",
    "prompt_owner",
    "status_of",
]

_R = TypeVar("_R")
_T = TypeVar("_T", bound=Owned)


@dataclass(frozen=True, slots=True)
class Failure:
    """A member that did not answer, or answered with an error: who, where, and why."""

    member: Member
    error: SupervisorError

    @property
    def unreachable(self) -> bool:
        """Nothing answered at its endpoint (or it refused this client's key)."""
        return isinstance(self.error, SupervisorUnreachableError)

    def __str__(self) -> str:
        return f"{self.member.name} ({self.member.endpoint}): {self.error}"


@dataclass(frozen=True, slots=True)
class Outcome(Generic[_R]):
    """One member's answer to a request sent to every member: its ``value``, or its ``failure``."""

    member: Member
    value: _R | None = None
    failure: Failure | None = None


@dataclass(slots=True)
class Listing(Generic[_T]):
    """The members' entries as one (each server's from its owner), who owns each server, the clashes,
    and the members not heard from."""

    entries: list[_T] = field(default_factory=list)
    owners: dict[str, Member] = field(default_factory=dict)
    clashes: list[Clash] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Row:
    """A status row and the member (the host) it comes from."""

    member: Member
    status: ServerStatus


@dataclass(slots=True)
class Status:
    """Every reachable member's rows (clashing servers' too: each row names its member), who owns each
    server, the clashes, and the members not heard from."""

    rows: list[Row] = field(default_factory=list)
    owners: dict[str, Member] = field(default_factory=dict)
    clashes: list[Clash] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Clash:
    """A server several members list: the member that keeps it, and one whose copy is left out."""

    server: str
    owner: Member
    left_out: Member

    def __str__(self) -> str:
        owner, left = self.owner, self.left_out
        return (
            f"server {self.server!r} is on {owner.name} ({owner.endpoint}) and on {left.name} "
            f"({left.endpoint}): {owner.name}'s is used, {left.name}'s is left out"
        )


def listing_of(members: Sequence[Member], outcomes: Sequence[Outcome[list[_T]]]) -> Listing[_T]:
    """The members' answers (one outcome each, in the members' order) as one listing."""
    merged: Merged[_T] = merge([outcome.value for outcome in outcomes])
    return Listing(
        merged.entries,
        {server: members[index] for server, index in merged.owners.items()},
        [Clash(s, members[o], members[x]) for s, o, x in merged.clashes],
        [outcome.failure for outcome in outcomes if outcome.failure is not None],
    )


def status_of(members: Sequence[Member], outcomes: Sequence[Outcome[list[ServerStatus]]]) -> Status:
    """The members' status rows (one outcome each, in the members' order), every row with its member."""
    listing = listing_of(members, outcomes)
    rows = [Row(o.member, row) for o in outcomes for row in o.value or ()]
    return Status(rows, listing.owners, listing.clashes, listing.failures)


def named(member: Member, exc: SupervisorUnreachableError) -> SupervisorUnreachableError:
    """``exc`` saying which member did not answer."""
    return type(exc)(f"{member.name} ({member.endpoint}): {exc.message}")


def _nobody(kind: str, name: str, failures: Sequence[Failure], listed: str | None) -> SupervisorError:
    if failures:
        said = "; ".join(str(failure) for failure in failures)
        return SupervisorUnreachableError(f"no reachable supervisor has a {kind} named {name!r} ({said})")
    servers = "" if listed is None else f" (servers: {listed})"
    return UnknownToolError(f"no {kind} named {name!r} on any of the supervisors{servers}")


def prompt_owner(prompts: Listing[PromptInfo], name: str) -> Member:
    """The member whose prompts list the prefixed prompt ``name``; else why none does."""
    found = next((p.server for p in prompts.entries if p.name == name), None)
    if found is None:
        raise _nobody("prompt", name, prompts.failures, None)
    return prompts.owners[found]


class Owners:
    """Who owns each tool (from the last merged tool list) and each server (from the last merged
    status), and every server heard of (for errors). A client looks a name up here, asks again once
    when it is not known (``None``), and raises ``missing`` when it is still not."""

    def __init__(self) -> None:
        self.tools: dict[str, Member] | None = None  # tool name -> member
        self.servers: dict[str, Member] | None = None  # server -> member
        self.heard: set[str] = set()

    def learn_tools(self, listing: Listing[ToolInfo]) -> None:
        self.tools = {tool.name: listing.owners[tool.server] for tool in listing.entries}
        self.heard |= set(listing.owners)

    def learn_status(self, status: Status) -> None:
        self.servers = dict(status.owners)
        self.heard |= set(status.owners)

    def forget(self) -> None:
        """After a reload: every owner is asked again."""
        self.tools = self.servers = None

    def tool(self, name: str) -> Member | None:
        return None if self.tools is None else self.tools.get(name)

    def server(self, server: str) -> Member | None:
        return None if self.servers is None else self.servers.get(server)

    def missing(self, kind: str, name: str, failures: Sequence[Failure]) -> SupervisorError:
        """Why no member has the ``kind`` (tool, server) ``name``: an ``UnknownToolError`` naming the
        servers known, or, when some member did not answer, a ``SupervisorUnreachableError`` naming
        those members (the name may be theirs)."""
        return _nobody(kind, name, failures, ", ".join(sorted(self.heard)) or "none")
