"""The SDK's models, for what a lean stdio worker must judge exactly as the SDK judges it: loaded the
first time such a thing comes, never at start.

Above: ``workers.lean`` (the server's own requests; a handshake answer its own decoder refused) and
``workers.calls`` (a tool call whose result asks for input first). Below: ``mcp_types`` and pydantic,
and nothing of the ``mcp`` package (importing any of it loads the SDK's whole client and server).

What is done here is what the SDK's ``ClientSession`` does with the same messages:

- a server's request (``answer``): parsed against the negotiated version's table (an unknown method is
  ``Method not found``, bad params ``Invalid request parameters``), handed to the worker's callbacks
  (``workers.requests``: sampling, elicitation, roots; one not offered answers as the SDK's default
  does), the answer validated and written as the SDK writes it;
- a resource read, a prompt, a completion (``read_resource``, ``get_prompt``, ``complete``): sent with
  the params the SDK's request models dump, the result floored (``ttlMs``), checked against the
  negotiated version, a later revision's fields dropped, and validated by the model the SDK uses;
- a result that asks for input (2026-07-28 ``input_required``, ``provide_input`` and the reads above):
  its rounds run as the SDK's driver (``mcp.client._input_required``) runs them (every request of a
  round answered at once, a refusal ending the call, a state-only round retried after a backoff,
  at most ``MAX_INPUT_ROUNDS``), each retry sent by the worker.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from functools import cache
from types import UnionType
from typing import TYPE_CHECKING, Any, Final, cast, get_args

import mcp_types as types
import msgspec
import trio
from mcp_types import methods as _methods
from mcp_types.version import KNOWN_PROTOCOL_VERSIONS
from pydantic import BaseModel, TypeAdapter, ValidationError

from supervisor.protocol import ProgressCallback
from workers.server_errors import INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, MCPError

if TYPE_CHECKING:
    from workers.lean import LeanClient

__all__ = [
    "MAX_INPUT_ROUNDS",
    "InputRequiredRoundsExceededError",
    "answer",
    "complete",
    "get_prompt",
    "initialize_values",
    "provide_input",
    "read_resource",
]

MAX_INPUT_ROUNDS: Final = 10  # the SDK's DEFAULT_INPUT_REQUIRED_MAX_ROUNDS
STATE_ONLY_BACKOFF: Final = (0.05, 0.25)  # seconds before retrying a state-only round: first, at most

log = logging.getLogger("client")  # the SDK's session logs under this name

_ClientResponse: TypeAdapter[types.ClientResult | types.ErrorData] = TypeAdapter(
    types.ClientResult | types.ErrorData
)
_CallResult: TypeAdapter[types.CallToolResult | types.InputRequiredResult] = TypeAdapter(
    types.CallToolResult | types.InputRequiredResult
)
_PromptResult: TypeAdapter[types.GetPromptResult | types.InputRequiredResult] = TypeAdapter(
    types.GetPromptResult | types.InputRequiredResult
)
_ReadResult: TypeAdapter[types.ReadResourceResult | types.InputRequiredResult] = TypeAdapter(
    types.ReadResourceResult | types.InputRequiredResult
)
_NO_CONTEXT: Any = None  # the worker's callbacks read nothing of the SDK's request context


def _dump(model: BaseModel) -> dict[str, Any]:
    dumped: dict[str, Any] = model.model_dump(by_alias=True, mode="json", exclude_none=True)
    return dumped


# ---------------------------------------------------------------- the handshake


def initialize_values(raw: msgspec.Raw) -> dict[str, Any]:
    """An ``initialize`` result the worker's decoder refused, judged by the SDK (raises its
    ``ValidationError``, as the SDK's session would), as JSON values."""
    values = json.loads(bytes(raw))
    _methods.validate_server_result("initialize", "2025-11-25", values)
    return _dump(types.InitializeResult.model_validate(values, by_name=False))


def valid_discover(raw: msgspec.Raw | dict[str, Any]) -> bool:
    values = json.loads(bytes(raw)) if isinstance(raw, msgspec.Raw) else raw
    try:
        types.DiscoverResult.model_validate(values)
    except ValidationError:
        return False
    return True


def discover_values(raw: msgspec.Raw | dict[str, Any]) -> dict[str, Any]:
    values = json.loads(bytes(raw)) if isinstance(raw, msgspec.Raw) else raw
    return _dump(types.DiscoverResult.model_validate(values))


# ---------------------------------------------------------------- the server's requests


def _callbacks(client: LeanClient) -> dict[str, Callable[..., Awaitable[Any]]]:
    return cast(dict[str, Callable[..., Awaitable[Any]]], client.requests.client_options())


async def _dispatch(client: LeanClient, request: Any) -> Any:
    """One input request through the worker's callbacks (``ClientSession.dispatch_input_request``)."""
    offered = _callbacks(client)
    match request:
        case types.CreateMessageRequest(params=params):
            if "sampling_callback" not in offered:
                return types.ErrorData(code=INVALID_REQUEST, message="Sampling not supported")
            return await offered["sampling_callback"](_NO_CONTEXT, params)
        case types.ElicitRequest(params=params):
            if "elicitation_callback" not in offered:
                return types.ErrorData(code=INVALID_REQUEST, message="Elicitation not supported")
            return await offered["elicitation_callback"](_NO_CONTEXT, params)
        case _:
            if "list_roots_callback" not in offered:
                return types.ErrorData(code=INVALID_REQUEST, message="List roots not supported")
            return await offered["list_roots_callback"](_NO_CONTEXT)


async def answer(
    client: LeanClient, request_id: int | str, method: str, params: dict[str, Any] | None
) -> dict[str, Any]:
    """The JSON-RPC answer to one of the server's requests (``ClientSession._on_request``)."""
    version = client.protocol_version or "2025-11-25"
    try:
        try:
            request = _methods.parse_server_request(method, version, params)
        except KeyError:
            raise MCPError(METHOD_NOT_FOUND, "Method not found", method) from None
        if isinstance(request, types.PingRequest):
            response: Any = types.EmptyResult()
        else:
            response = await _dispatch(client, request)
        checked = _ClientResponse.validate_python(response)
        if isinstance(checked, types.ErrorData):
            raise MCPError(checked.code, checked.message, checked.data)
        dumped = _dump(checked)
        try:
            _methods.validate_client_result(method, version, dumped)
        except ValidationError:
            log.exception("client callback for %r returned an invalid result", method)
            raise MCPError(INTERNAL_ERROR, "Client callback returned an invalid result") from None
        return {"jsonrpc": "2.0", "id": request_id, "result": dumped}
    except MCPError as exc:
        return _error(request_id, exc.code, exc.message, exc.data)
    except ValidationError:
        return _error(request_id, INVALID_PARAMS, "Invalid request parameters", "")
    except Exception as exc:  # boundary: the dispatcher's, which answers code 0
        log.exception("handler for %r raised", method)
        return _error(request_id, 0, str(exc), None)


def _error(request_id: int | str, code: int, message: str, data: Any) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": error}


# ---------------------------------------------------------------- results checked as the SDK checks them


@cache
def _wire_fields(target: type[BaseModel] | UnionType) -> frozenset[str]:
    members: tuple[Any, ...] = get_args(target) if isinstance(target, UnionType) else (target,)
    fields: set[str] = set()
    for model in members:
        if isinstance(model, type) and issubclass(model, BaseModel):
            fields.update(field.alias or name for name, field in model.model_fields.items())
    return frozenset(fields)


@cache
def _later_revision_fields(method: str, version: str) -> frozenset[str]:
    """Result keys only a revision newer than ``version`` declares (the SDK drops them)."""
    current = _methods.SERVER_RESULTS.get((method, version))
    if current is None or version not in KNOWN_PROTOCOL_VERSIONS:
        return frozenset()
    later: set[str] = set()
    for revision in KNOWN_PROTOCOL_VERSIONS[KNOWN_PROTOCOL_VERSIONS.index(version) + 1 :]:
        row = _methods.SERVER_RESULTS.get((method, revision))
        if row is not None:
            later |= _wire_fields(row)
    return frozenset(later) - _wire_fields(current)


async def _request(
    client: LeanClient,
    method: str,
    params: dict[str, Any],
    adapter: TypeAdapter[Any],
    progress: ProgressCallback | None = None,
    trace: dict[str, str] | None = None,
) -> Any:
    """Send a request of the worker's; its result validated as ``ClientSession.send_request`` does."""
    raw: dict[str, Any] = json.loads(bytes(await client.own.request(method, params, progress, trace)))
    ttl = raw.get("ttlMs")
    if isinstance(ttl, int | float) and not isinstance(ttl, bool) and ttl < 0:
        raw["ttlMs"] = 0
    version = client.protocol_version or "2025-11-25"
    with contextlib.suppress(KeyError):  # a method the version's table lacks is not checked
        _methods.validate_server_result(method, version, raw)
    if not (foreign := _later_revision_fields(method, version)).isdisjoint(raw):
        raw = {key: value for key, value in raw.items() if key not in foreign}
    return adapter.validate_python(raw, by_name=False)


class InputRequiredRoundsExceededError(RuntimeError):
    """The server kept asking for input past ``MAX_INPUT_ROUNDS`` rounds (the SDK's error, and words)."""

    def __init__(self, max_rounds: int) -> None:
        super().__init__(
            f"Server returned InputRequiredResult for more than {max_rounds} rounds; "
            "raise input_required_max_rounds on the Client, or use "
            "client.session.<method>(..., allow_input_required=True) to drive the loop manually."
        )


async def _finish(client: LeanClient, first: Any, retry: Callable[[Any, str | None], Awaitable[Any]]) -> Any:
    """A result that asks for input, taken through its rounds (``run_input_required_driver``); any
    other result as it is."""
    rounds, delay = 0, STATE_ONLY_BACKOFF[0]
    current = first
    while isinstance(current, types.InputRequiredResult):
        rounds += 1
        if rounds > MAX_INPUT_ROUNDS:
            raise InputRequiredRoundsExceededError(MAX_INPUT_ROUNDS)
        responses: dict[str, Any] | None = None
        if current.input_requests:
            delay = STATE_ONLY_BACKOFF[0]
            responses = await _answer_all(client, current.input_requests)
        else:
            await trio.sleep(delay)
            delay = min(delay * 2, STATE_ONLY_BACKOFF[1])
        current = await retry(responses, current.request_state)
    return current


async def _answer_all(client: LeanClient, requests: dict[str, Any]) -> dict[str, Any]:
    """Every request of a round answered at once; the first refusal cancels the rest and ends the call."""
    responses: dict[str, Any] = {}
    refused: types.ErrorData | None = None

    async def one(nursery: trio.Nursery, key: str, request: Any) -> None:
        nonlocal refused
        result = await _dispatch(client, request)
        if isinstance(result, types.ErrorData):
            refused = result
            nursery.cancel_scope.cancel()
        else:
            responses[key] = result

    async with trio.open_nursery() as nursery:
        for key, request in requests.items():
            nursery.start_soon(one, nursery, key, request)
    if refused is not None:
        raise MCPError(refused.code, refused.message, refused.data)
    return responses


def _params(model: BaseModel) -> dict[str, Any]:
    return _dump(model)


async def read_resource(client: LeanClient, uri: str) -> types.ReadResourceResult:
    async def retry(responses: Any, state: str | None) -> Any:
        params = types.ReadResourceRequestParams(uri=uri, input_responses=responses, request_state=state)
        return await _request(client, "resources/read", _params(params), _ReadResult)

    return cast(types.ReadResourceResult, await _finish(client, await retry(None, None), retry))


async def get_prompt(
    client: LeanClient, name: str, arguments: dict[str, str] | None
) -> types.GetPromptResult:
    async def retry(responses: Any, state: str | None) -> Any:
        params = types.GetPromptRequestParams(
            name=name, arguments=arguments, input_responses=responses, request_state=state
        )
        return await _request(client, "prompts/get", _params(params), _PromptResult)

    return cast(types.GetPromptResult, await _finish(client, await retry(None, None), retry))


async def complete(
    client: LeanClient, ref: Any, argument: dict[str, str], context: dict[str, str] | None
) -> types.CompleteResult:
    params = types.CompleteRequestParams(
        ref=ref,
        argument=types.CompletionArgument(**argument),
        context=None if context is None else types.CompletionContext(arguments=context),
    )
    adapter: TypeAdapter[types.CompleteResult] = TypeAdapter(types.CompleteResult)
    return cast(types.CompleteResult, await _request(client, "completion/complete", _params(params), adapter))


async def provide_input(
    client: LeanClient,
    tool: str,
    arguments: dict[str, Any],
    raw: msgspec.Raw,
    progress: ProgressCallback | None,
    trace: dict[str, str] | None = None,
) -> types.CallToolResult:
    """Finish a tool call whose first answer asks for input (the SDK's ``Client.call_tool`` rounds);
    each retry carries the call's progress token and trace context, as its first request did."""
    first = types.InputRequiredResult.model_validate_json(bytes(raw), by_name=False)

    async def retry(responses: Any, state: str | None) -> Any:
        params = types.CallToolRequestParams(
            name=tool, arguments=arguments, input_responses=responses, request_state=state
        )
        return await _request(client, "tools/call", _params(params), _CallResult, progress, trace)

    return cast(types.CallToolResult, await _finish(client, first, retry))
