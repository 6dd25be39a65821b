"""What a server may ask of its client, and what a worker answers (there is no user at a worker).

A caller that answers sampling or elicitation requests itself (its stub's handlers; ``Invoke.answers``)
answers those that arise in its own call (``workers.asking`` tells whose call asked); the rest are
answered by the config:

- ``roots/list``: the server's ``roots`` from the config. Without any, roots are
  not offered, and the request is refused as the SDK refuses it ("List roots not supported").
- ``elicitation/create``: declined, with a warning naming the server's message.
  With ``"elicitation": "defaults"``, a form is accepted filled with the defaults
  its schema gives, when every required field has one (else it is declined).
  A URL-mode elicitation (open this page) is always declined.
- ``sampling/createMessage``: not offered, so it is refused as the SDK refuses it ("Sampling not
  supported"), unless the server has a ``sampling`` program or ``"sampling": "caller"`` (refused
  when no caller answers it). That program gets
  the request's params as JSON on stdin and must print a ``CreateMessageResult``
  as JSON on stdout within its ``timeout``; anything else is refused with an
  error naming what went wrong.

The callbacks (``client_options``) are handed to the SDK's ``mcp.Client`` on a remote server, and
called by ``workers.lean_sdk`` on a stdio one; either way they take and give the SDK's models, which
this module imports only when a request comes.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import TYPE_CHECKING, Any, Final, NamedTuple, TypeVar

import trio

from supervisor.config.model import SamplingHook, ServerSpec
from workers.asking import CallerAnswer
from workers.server_errors import INTERNAL_ERROR

if TYPE_CHECKING:  # the callbacks' models are loaded when the server first asks (``workers.lean_sdk``)
    from mcp.client.session import ClientRequestContext
    from mcp_types import (
        CreateMessageRequestParams,
        CreateMessageResult,
        CreateMessageResultWithTools,
        ElicitRequestParams,
        ElicitResult,
        ErrorData,
        ListRootsResult,
    )
    from pydantic import BaseModel

__all__ = ["ServerRequests", "fill_defaults"]

log = logging.getLogger("mcp_supervisor.worker")

MAX_OUTPUT: Final = 16 * 1024 * 1024  # bytes of a sampling program's stdout (or stderr) kept
SHOWN: Final = 200  # characters of a server's message or a program's output put in a log line or error


def _shown(text: str | bytes) -> str:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    text = text.strip()
    return repr(text if len(text) <= SHOWN else text[:SHOWN] + "...")


def fill_defaults(schema: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The form's content from the defaults in its schema, and the required fields that have none."""
    properties = schema.get("properties")
    content = {
        name: prop["default"]
        for name, prop in (properties.items() if isinstance(properties, dict) else ())
        if isinstance(prop, dict) and "default" in prop
    }
    required = schema.get("required")
    missing = [name for name in (required if isinstance(required, list) else ()) if name not in content]
    return content, missing


class ServerRequests:
    """The callbacks a worker hands to ``mcp.Client`` for one server's requests."""

    def __init__(self, spec: ServerSpec) -> None:
        self.spec = spec
        self.pids: set[int] = set()  # running sampling programs (trio reaps them itself)
        self._spawning = 0
        # The calling client's answer, if one of the calls in flight is its and it answers such requests.
        self.ask_caller: Callable[[str, dict[str, Any]], Awaitable[CallerAnswer | None]] = _nobody

    def client_options(self) -> dict[str, Any]:
        """Keyword arguments for ``mcp.Client``: a callback offers the capability to the server."""
        options: dict[str, Any] = {"elicitation_callback": self.elicit}
        if self.spec.roots:
            options["list_roots_callback"] = self.list_roots
        if self.spec.sampling is not None or self.spec.sampling_caller:
            options["sampling_callback"] = self.sample
        return options

    def children(self) -> set[int] | None:
        """Sampling programs that trio waits for, or None while one is being spawned."""
        return None if self._spawning else set(self.pids)

    async def list_roots(self, context: ClientRequestContext) -> ListRootsResult:
        from mcp_types import ListRootsResult, Root

        roots = [Root.model_validate({"uri": root.uri, "name": root.name}) for root in self.spec.roots]
        return ListRootsResult(roots=roots)

    async def elicit(
        self, context: ClientRequestContext, params: ElicitRequestParams
    ) -> ElicitResult | ErrorData:
        from mcp_types import CreateMessageResultWithTools, ElicitRequestFormParams, ElicitResult

        asked = await self.ask_caller("elicitation/create", _json(params))
        if asked is not None:
            answer = _from_caller(asked, ElicitResult, "elicitation", params.message)
            assert not isinstance(answer, CreateMessageResultWithTools)
            return answer
        if not isinstance(params, ElicitRequestFormParams):
            log.warning("server asked for a URL to be opened (%s): declined", _shown(params.message))
            return ElicitResult(action="decline")
        if self.spec.elicitation != "defaults":
            log.warning(
                'server asked for input (%s): declined; "elicitation": "defaults" accepts forms '
                "whose schema gives a default for every required field",
                _shown(params.message),
            )
            return ElicitResult(action="decline")
        content, missing = fill_defaults(params.requested_schema)
        if missing:
            log.warning(
                "server asked for input (%s): declined, no default for required field(s) %s",
                _shown(params.message),
                ", ".join(missing),
            )
            return ElicitResult(action="decline")
        log.info(
            "server asked for input (%s): accepted with the schema's defaults for %s",
            _shown(params.message),
            ", ".join(content) or "no fields",
        )
        return ElicitResult(action="accept", content=content)

    async def sample(
        self, context: ClientRequestContext, params: CreateMessageRequestParams
    ) -> CreateMessageResult | CreateMessageResultWithTools | ErrorData:
        from mcp_types import CreateMessageResult, CreateMessageResultWithTools
        from pydantic import ValidationError

        asked = await self.ask_caller("sampling/createMessage", _json(params))
        if asked is not None:
            return _from_caller(asked, CreateMessageResult, "sampling", None)
        hook = self.spec.sampling
        if hook is None:  # "sampling": "caller", and no caller of a call in flight answers
            return self._refuse(
                "no caller answers it: the calls in flight were made without a sampling handler, "
                "or by several clients"
            )
        request = params.model_dump_json(by_alias=True, exclude_none=True).encode()
        try:
            with trio.fail_after(hook.timeout):
                done = await self._run(hook, request)
        except trio.TooSlowError:
            return self._refuse(f"sampling program timed out after {hook.timeout:g} s")
        except OSError as exc:
            return self._refuse(f"sampling program {hook.command!r} cannot be run: {exc.strerror or exc}")
        if done.returncode != 0:
            stderr = _shown(done.stderr) if done.stderr.strip() else "no stderr"
            return self._refuse(f"sampling program exited with status {done.returncode} ({stderr})")
        result: CreateMessageResult | CreateMessageResultWithTools
        try:
            result = CreateMessageResult.model_validate_json(done.stdout)
        except ValidationError:
            try:
                result = CreateMessageResultWithTools.model_validate_json(done.stdout)
            except ValidationError as exc:
                problem = exc.errors()[0]
                where = ".".join(str(part) for part in problem["loc"]) or "output"
                return self._refuse(
                    f"sampling program printed no CreateMessageResult ({where}: {problem['msg']}; "
                    f"output {_shown(done.stdout)})"
                )
        log.info("sampling request answered by the sampling program (model %s)", result.model)
        return result

    def _refuse(self, why: str) -> ErrorData:
        from mcp_types import ErrorData

        log.warning("sampling request refused: %s", why)
        return ErrorData(code=INTERNAL_ERROR, message=why)

    async def _run(self, hook: SamplingHook, request: bytes) -> Ran:
        """Run the sampling program on ``request``; cancelled, it is killed with its process group."""
        self._spawning += 1
        try:
            process = await trio.lowlevel.open_process(
                [hook.command, *hook.args],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=self.spec.cwd,
                start_new_session=True,
            )
            self.pids.add(process.pid)
        finally:
            self._spawning -= 1
        assert process.stdin and process.stdout and process.stderr, "all three are pipes"
        stdout, stderr = bytearray(), bytearray()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_feed, process.stdin, request)
                nursery.start_soon(_drain, process.stdout, stdout)
                nursery.start_soon(_drain, process.stderr, stderr)
            returncode = await process.wait()
        finally:
            if process.returncode is None:
                with suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                with trio.CancelScope(shield=True):
                    await process.wait()
            self.pids.discard(process.pid)
        return Ran(returncode, bytes(stdout), bytes(stderr))


async def _nobody(method: str, params: dict[str, Any]) -> CallerAnswer | None:
    return None


def _json(params: BaseModel) -> dict[str, Any]:
    dumped: dict[str, Any] = params.model_dump(mode="json", by_alias=True, exclude_none=True)
    return dumped


_Result = TypeVar("_Result", "ElicitResult", "CreateMessageResult")


def _from_caller(
    asked: CallerAnswer, kind: type[_Result], what: str, message: str | None
) -> _Result | CreateMessageResultWithTools | ErrorData:
    """The caller's answer as the SDK's result, or an error saying why there is none."""
    from mcp_types import CreateMessageResult, CreateMessageResultWithTools, ErrorData
    from pydantic import ValidationError

    about = f" ({_shown(message)})" if message is not None else ""
    if asked.result is None:
        log.warning("%s request%s: %s", what, about, asked.error)
        return ErrorData(code=INTERNAL_ERROR, message=asked.error or "no answer")
    try:
        result: _Result | CreateMessageResultWithTools = kind.model_validate(asked.result)
    except ValidationError as exc:
        if kind is CreateMessageResult:
            with suppress(ValidationError):
                result = CreateMessageResultWithTools.model_validate(asked.result)
                log.info("%s request%s answered by the caller", what, about)
                return result
        problem = exc.errors()[0]
        where = ".".join(str(part) for part in problem["loc"]) or "result"
        why = f"the caller's answer is no {kind.__name__} ({where}: {problem['msg']})"
        log.warning("%s request%s: %s", what, about, why)
        return ErrorData(code=INTERNAL_ERROR, message=why)
    log.info("%s request%s answered by the caller", what, about)
    return result


class Ran(NamedTuple):
    returncode: int
    stdout: bytes
    stderr: bytes


async def _feed(stream: trio.abc.SendStream, data: bytes) -> None:
    """Write the request and close stdin; a program that exits without reading it is not an error here."""
    with suppress(trio.BrokenResourceError, trio.ClosedResourceError):
        await stream.send_all(data)
    await stream.aclose()


async def _drain(stream: trio.abc.ReceiveStream, into: bytearray) -> None:
    """Read to end-of-file, keeping at most ``MAX_OUTPUT`` bytes."""
    async with stream:
        while chunk := await stream.receive_some():
            into += chunk[: max(0, MAX_OUTPUT - len(into))]
