"""A stdio MCP server with per-process state: for tests of per-agent sessions, pools and server requests.

Run it as ``python tests/servers/session_server.py`` (the SDK's ``MCPServer``, named "session-server").
Every tool runs on the event loop, none in a worker thread.

Tools:
    counter_add {n: integer = 1}  -> adds ``n`` to this process's counter; the new value as text and {"value"}
    counter_get {}                -> the counter, as text and {"value"}
    cd {path: string}             -> ``os.chdir(path)``, then the new cwd; an isError result naming the path
                                     when that fails
    pwd {}                        -> ``os.getcwd()``
    whoami {}                     -> the server's pid as text and {"pid"}
    burn {ms: number}             -> a pure-Python loop on the event loop for ``ms`` milliseconds of CPU time
                                     (the process is busy on one core throughout); the iterations done
    sleep {seconds: number}       -> an async sleep, then "slept"
    sample {prompt: string}       -> asks the client ``sampling/createMessage`` (one user message, maxTokens
                                     50); "<model>: <text>" and {"model", "text"}
    elicit {message: string}      -> asks the client ``elicitation/create`` (form mode, a required string
                                     ``name``); "<action>: <content>" and {"action", "content"}

``sample`` and ``elicit`` ask the way the session's protocol version does: on a handshake-era session
(<= 2025-11-25) with a server-to-client request during the call; on a 2026-07-28 session, which has no
such requests, with an ``input_required`` result that the client answers by retrying the call with its
responses. A client that does not offer the capability gets an isError result either way; so does an
error answer on a handshake-era session (on 2026-07-28 such an error stays with the client's retry loop).
"""

from __future__ import annotations

import os
import time
from typing import Any, TypeVar

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types import (
    CallToolResult,
    ClientCapabilities,
    CreateMessageRequest,
    CreateMessageRequestParams,
    CreateMessageResult,
    ElicitationCapability,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    InputRequest,
    InputRequiredResult,
    SamplingCapability,
    SamplingMessage,
    TextContent,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

NAME_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"name": {"type": "string"}},
    "required": ["name"],
}
NEEDS = {  # what a 2026-07-28 client must declare before it is asked
    "sampling/createMessage": ClientCapabilities(sampling=SamplingCapability()),
    "elicitation/create": ClientCapabilities(elicitation=ElicitationCapability()),
}
BURN_BATCH = 1000  # loop iterations between two looks at the CPU clock

R = TypeVar("R", CreateMessageResult, ElicitResult)
Ctx = Context[Any, Any]
mcp = MCPServer("session-server", log_level="WARNING")
counter = 0


def _result(text: str, structured: dict[str, Any] | None = None) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=structured)


async def _ask(ctx: Ctx, request: InputRequest, result_type: type[R]) -> R | InputRequiredResult:
    """The client's answer to ``request``, or (2026-07-28, first round) the result that asks for it."""
    key = request.method
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        metadata = ServerMessageMetadata(related_request_id=ctx.request_context.request_id)
        try:
            return await ctx.request_context.session.send_request(request, result_type, metadata=metadata)
        except MCPError as exc:
            raise ToolError(f"{key} failed: {exc}") from exc
    answer = (ctx.input_responses or {}).get(key)
    if answer is None:
        if not ctx.request_context.session.check_client_capability(NEEDS[key]):
            raise ToolError(f"{key} failed: the client does not offer it")
        return InputRequiredResult(input_requests={key: request})
    try:
        return result_type.model_validate(answer.model_dump(by_alias=True, mode="json", exclude_none=True))
    except ValidationError as exc:
        raise ToolError(f"{key}: the client's answer is not a {result_type.__name__}") from exc


@mcp.tool()
async def counter_add(n: int = 1) -> CallToolResult:
    """Add ``n`` to this process's counter and return the new value."""
    global counter
    counter += n
    return _result(str(counter), {"value": counter})


@mcp.tool()
async def counter_get() -> CallToolResult:
    """This process's counter."""
    return _result(str(counter), {"value": counter})


@mcp.tool()
async def cd(path: str) -> CallToolResult:
    """Change the server's working directory to ``path``; return the new one."""
    try:
        os.chdir(path)
    except OSError as exc:
        raise ToolError(f"cd {path!r}: {exc.strerror or exc}") from exc
    return _result(os.getcwd())


@mcp.tool()
async def pwd() -> CallToolResult:
    """The server's working directory."""
    return _result(os.getcwd())


@mcp.tool()
async def whoami() -> CallToolResult:
    """The server's process id."""
    return _result(str(os.getpid()), {"pid": os.getpid()})


@mcp.tool()
async def burn(ms: float) -> CallToolResult:
    """Spin for ``ms`` milliseconds of CPU time, blocking the whole server; the iterations done."""
    deadline = time.thread_time() + ms / 1000
    iterations = x = 0
    while time.thread_time() < deadline:
        for _ in range(BURN_BATCH):
            x = (x * 31 + 7) % 1_000_003
        iterations += BURN_BATCH
    return _result(str(iterations))


@mcp.tool()
async def sleep(seconds: float) -> CallToolResult:
    """Sleep for ``seconds`` without blocking the server."""
    await anyio.sleep(seconds)
    return _result("slept")


@mcp.tool()
async def sample(prompt: str, ctx: Ctx) -> CallToolResult | InputRequiredResult:
    """Ask the client's model ``prompt``; return the model's name and answer."""
    message = SamplingMessage(role="user", content=TextContent(type="text", text=prompt))
    request = CreateMessageRequest(params=CreateMessageRequestParams(messages=[message], max_tokens=50))
    answer = await _ask(ctx, request, CreateMessageResult)
    if isinstance(answer, InputRequiredResult):
        return answer
    content = answer.content
    text = content.text if isinstance(content, TextContent) else f"<{content.type}>"
    return _result(f"{answer.model}: {text}", {"model": answer.model, "text": text})


@mcp.tool()
async def elicit(message: str, ctx: Ctx) -> CallToolResult | InputRequiredResult:
    """Ask the client for a name with ``message``; return its action and content."""
    request = ElicitRequest(params=ElicitRequestFormParams(message=message, requested_schema=NAME_SCHEMA))
    answer = await _ask(ctx, request, ElicitResult)
    if isinstance(answer, InputRequiredResult):
        return answer
    return _result(f"{answer.action}: {answer.content}", {"action": answer.action, "content": answer.content})


if __name__ == "__main__":
    mcp.run()
