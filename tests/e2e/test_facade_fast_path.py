"""The facade's fast path for ``tools/call`` and ``tools/list``, against the SDK's own path, in real
processes: a supervisor running the test server, and two facades on it, one as shipped and one with
``--no-fast-path`` (every request through the SDK), spoken to by hand with the same requests.

On stdio, for every protocol version (the four of the handshake era, and 2026-07-28 with each
request's envelope): listings, plain results, structured results, ``isError`` results, results whose
content the SDK's models reshape, an unknown tool, bad arguments, progress and cancellation; on
streamable HTTP, the 2026-07-28 POSTs, their statuses included, and the requests of 2025-11-25 host
sessions (event streams with a priming event, each answer kept for a host that resumes the stream).
The answers are the same JSON values; the fast facade says (its debug log) that it answered on the
fast path, and requests it must leave to the SDK (progress, a host that may be asked, a session it
does not know) are answered alike without it.
"""

from __future__ import annotations

import itertools
import json
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

import httpx2
import mcp_types as types
import pytest
import trio

from tests.e2e.facade import HOST_TIMEOUT, HttpFacade, PipeHost, facade_argv
from tests.e2e.harness import SupervisorProcess, poll, stdio_test_server

pytestmark = pytest.mark.e2e

MODERN: Final = "2026-07-28"
PROTOCOLS: Final = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", MODERN)
ENVELOPE: Final = {
    types.PROTOCOL_VERSION_META_KEY: MODERN,
    types.CLIENT_INFO_META_KEY: {"name": "raw", "version": "0"},
    types.CLIENT_CAPABILITIES_META_KEY: {},
}
TOKEN: Final = f"fast-path-{secrets.token_hex(8)}"
FAST: Final = "answered on the fast path"
CALLS: Final = {
    "a plain result": ("mcp_t_echo", {"text": "hi ñ"}),
    "a structured result": ("mcp_t_add", {"a": 2, "b": 3.5}),
    "an isError result": ("mcp_t_fail", {"message": "it failed"}),
    "a server's JSON-RPC error": ("mcp_t_raise_error", {"message": "raised"}),
    "an image": ("mcp_t_image", {}),
    "content the SDK's models reshape": ("mcp_t_mixed", {}),
    "no content": ("mcp_t_empty", {}),
    "an unknown tool": ("mcp_t_no_such_tool", {}),
    "bad arguments": ("mcp_t_echo", {"text": 5}),
}


@pytest.fixture(scope="module")
def sup(start_module_supervisor: Callable[..., SupervisorProcess]) -> SupervisorProcess:
    return start_module_supervisor({"t": stdio_test_server(TEST_SERVER_STATE_DIR="{state}")})


class StdioFacade(PipeHost):
    """``mcp-supervisor mcp`` on pipes, spoken to by hand (``PipeHost``), with the debug log on."""

    def __init__(self, sup: SupervisorProcess, stderr_path: Path, *args: str) -> None:
        super().__init__(facade_argv(sup.endpoint, "mcp", "--log-level", "debug", *args), stderr_path)
        self._ids = itertools.count(1)
        self.modern = False

    def send(self, message: dict[str, Any]) -> None:
        self.send_line(json.dumps({"jsonrpc": "2.0", **message}).encode())

    def request(self, method: str, params: dict[str, Any] | None = None, **meta: Any) -> str:
        """Send a request (with the envelope on 2026-07-28); its id."""
        id = f"r{next(self._ids)}"
        params = dict(params or {})
        if self.modern or meta:
            params["_meta"] = {**(ENVELOPE if self.modern else {}), **meta}
        self.send({"id": id, "method": method, **({"params": params} if params else {})})
        return id

    def call(self, method: str, params: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
        return self.answer(self.request(method, params, **meta))

    def open(self, version: str, capabilities: dict[str, Any] | None = None) -> None:
        """The handshake (or, on 2026-07-28, a first request with its envelope), and a listing that
        waits for the supervisor's tools."""
        if version == MODERN:
            self.modern = True
        else:
            init = {
                "protocolVersion": version,
                "capabilities": capabilities or {},
                "clientInfo": ENVELOPE[types.CLIENT_INFO_META_KEY],
            }
            assert self.call("initialize", init)["result"]["protocolVersion"] == version
            self.send({"method": "notifications/initialized"})
        assert "mcp_t_echo" in {tool["name"] for tool in self.call("tools/list")["result"]["tools"]}


@pytest.fixture
def pair(sup: SupervisorProcess, tmp_path: Path) -> Iterator[tuple[StdioFacade, StdioFacade]]:
    """A facade as shipped and one with ``--no-fast-path``, on the same supervisor."""
    fast = StdioFacade(sup, tmp_path / "fast.stderr")
    sdk = StdioFacade(sup, tmp_path / "sdk.stderr", "--no-fast-path")
    try:
        yield fast, sdk
    finally:
        fast.close()
        sdk.close()


def without_ids(message: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in message.items() if key != "id"}


@pytest.mark.parametrize("version", PROTOCOLS)
def test_the_fast_path_answers_every_kind_of_call_as_the_sdk_does(
    pair: tuple[StdioFacade, StdioFacade], version: str
) -> None:
    fast, sdk = pair
    for facade in pair:
        facade.open(version)
    for what, (name, arguments) in CALLS.items():
        answers = [without_ids(f.call("tools/call", {"name": name, "arguments": arguments})) for f in pair]
        assert answers[0] == answers[1], what
    assert without_ids(fast.call("tools/list")) == without_ids(sdk.call("tools/list"))
    assert f"tools/call of protocol {version} {FAST}" in fast.stderr
    assert f"tools/list of protocol {version} {FAST}" in fast.stderr
    assert FAST not in sdk.stderr


@pytest.mark.parametrize("version", [PROTOCOLS[0], "2025-11-25", MODERN])
def test_progress_reaches_the_host_under_its_token_as_on_the_sdks_path(
    pair: tuple[StdioFacade, StdioFacade], version: str
) -> None:
    for facade in pair:
        facade.open(version)
        facade.stray.clear()
        answer = facade.call(
            "tools/call", {"name": "mcp_t_progress", "arguments": {"count": 3}}, progressToken=7
        )
        assert answer["result"]["content"] == [{"type": "text", "text": "sent 3"}]
        heard = [m for m in facade.stray if m.get("method") == "notifications/progress"]
        assert heard, f"no progress reached the host: {facade.stray}"
        for note in heard:  # how many: as the worker coalesced them; their shape: the SDK's
            assert note.keys() == {"jsonrpc", "method", "params"}
            assert note["params"]["progressToken"] == 7
            assert note["params"].keys() <= {"progressToken", "progress", "total", "message"}
        assert heard[-1]["params"]["progress"] <= 3
    assert f"tools/call of protocol {version} {FAST}" in pair[0].stderr


@pytest.mark.parametrize("version", ["2025-11-25", MODERN])
def test_a_cancelled_call_is_cancelled_at_the_server_and_never_answered(
    pair: tuple[StdioFacade, StdioFacade], sup: SupervisorProcess, version: str
) -> None:
    for index, facade in enumerate(pair):
        facade.open(version)
        tag = f"cancel-{version}-{index}"
        slow = facade.request("tools/call", {"name": "mcp_t_slow", "arguments": {"seconds": 60, "tag": tag}})
        poll("the slow call to start", (sup.state_dir / f"{tag}.started").exists, HOST_TIMEOUT)
        facade.send({"method": "notifications/cancelled", "params": {"requestId": slow, "reason": "test"}})
        poll("the server to hear of the cancel", (sup.state_dir / f"{tag}.cancelled").exists, HOST_TIMEOUT)
        facade.stray.clear()
        assert facade.call("tools/call", {"name": "mcp_t_echo", "arguments": {"text": "on"}})["result"]
        assert not [m for m in facade.stray if m.get("id") == slow], "a cancelled call was answered"
    assert f"tools/call of protocol {version} {FAST}" in pair[0].stderr


UNUSUAL: Final = {
    "another key in _meta": ({"name": "mcp_t_echo", "arguments": {"text": "x"}, "_meta": {"other": 1}}),
    "many brackets": ({"name": "mcp_t_echo", "arguments": {"text": "x", "l": [[]] * 250}}),
    "arguments that are null": ({"name": "mcp_t_echo", "arguments": None}),
}


def test_unusual_requests_and_hosts_that_may_be_asked_go_the_sdks_way_with_the_same_answers(
    pair: tuple[StdioFacade, StdioFacade],
) -> None:
    for facade in pair:
        facade.open("2025-11-25", capabilities={"sampling": {}})  # calls that may ask it: the SDK's
    for what, params in [
        *UNUSUAL.items(),
        ("a host that may be asked", {"name": "mcp_t_echo", "arguments": {}}),
    ]:
        answers = [without_ids(f.call("tools/call", params)) for f in pair]
        assert answers[0] == answers[1], what
    assert f"tools/call of protocol 2025-11-25 {FAST}" not in pair[0].stderr


def test_before_the_handshake_everything_is_the_sdks(pair: tuple[StdioFacade, StdioFacade]) -> None:
    for facade in pair:
        facade.stray.clear()
    answers = [
        without_ids(f.call("tools/call", {"name": "mcp_t_echo", "arguments": {"text": "x"}})) for f in pair
    ]
    assert answers[0] == answers[1]
    assert answers[0]["error"]["code"] == types.INVALID_PARAMS
    assert FAST not in pair[0].stderr


# ------------------------------------------------------------------ streamable HTTP, 2026-07-28


@pytest.fixture
def http_pair(sup: SupervisorProcess, tmp_path: Path) -> Iterator[tuple[HttpFacade, HttpFacade]]:
    fast = HttpFacade(tmp_path, sup.endpoint, TOKEN, "--log-level", "debug")
    sdk = HttpFacade(tmp_path, sup.endpoint, TOKEN, "--log-level", "debug", "--no-fast-path")
    try:
        yield fast, sdk
    finally:
        fast.stop()
        sdk.stop()


def headers_for(method: str, name: str | None = None, **more: str) -> dict[str, str]:
    headers = {
        "Authorization": f"Bearer {TOKEN}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": method,
    }
    if name is not None:
        headers["Mcp-Name"] = name
    return {**headers, **more}


async def post(client: httpx2.AsyncClient, url: str, body: dict[str, Any], headers: dict[str, str]) -> Any:
    response = await client.post(url, content=json.dumps(body), headers=headers)
    kind = response.headers.get("content-type", "")
    if kind.startswith("text/event-stream"):
        events = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
        return response.status_code, kind, [json.loads(event) for event in events]
    return response.status_code, kind, response.json() if response.content else None


def modern_call(name: str, arguments: dict[str, Any] | None, **meta: Any) -> dict[str, Any]:
    params = {"name": name, "_meta": {**ENVELOPE, **meta}}
    if arguments is not None:
        params["arguments"] = arguments
    return {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": params}


async def test_http_posts_are_answered_as_the_sdk_answers_them(
    http_pair: tuple[HttpFacade, HttpFacade],
) -> None:
    listing = {"jsonrpc": "2.0", "id": 4, "method": "tools/list", "params": {"_meta": ENVELOPE}}
    cases: list[tuple[str, dict[str, Any], dict[str, str]]] = [
        ("a listing", listing, headers_for("tools/list")),
        *[
            (what, modern_call(name, arguments), headers_for("tools/call", name))
            for what, (name, arguments) in CALLS.items()
        ],
        # Left to the SDK: it answers these otherwise than the fast path would.
        (
            "a name header that disagrees",
            modern_call("mcp_t_echo", {}),
            headers_for("tools/call", "mcp_t_add"),
        ),
        ("a method header that disagrees", modern_call("mcp_t_echo", {}), headers_for("tools/list")),
        (
            "progress",
            modern_call("mcp_t_progress", {"count": 2}, progressToken=1),
            headers_for("tools/call", "mcp_t_progress"),
        ),
        (
            "an Accept without event streams",
            modern_call("mcp_t_echo", {"text": "x"}),
            {**headers_for("tools/call", "mcp_t_echo"), "Accept": "application/json"},
        ),
        (
            "a session id",
            modern_call("mcp_t_echo", {"text": "x"}),
            headers_for("tools/call", "mcp_t_echo", **{"Mcp-Session-Id": "x"}),
        ),
    ]
    async with httpx2.AsyncClient(timeout=HOST_TIMEOUT) as client:
        for facade in http_pair:  # the first listing waits for the supervisor's (the SDK's way)
            with trio.fail_after(HOST_TIMEOUT):
                first = await post(client, facade.url, listing, headers_for("tools/list"))
            assert "mcp_t_echo" in json.dumps(first)
        for what, body, headers in cases:
            with trio.fail_after(HOST_TIMEOUT):
                fast, sdk = [await post(client, facade.url, body, headers) for facade in http_pair]
            if what == "progress":  # the notifications' count is the worker's coalescing: the result
                assert fast[:2] == sdk[:2] and fast[2][-1] == sdk[2][-1], what
                continue
            assert fast == sdk, what
    assert f"tools/call of protocol {MODERN} {FAST}" in http_pair[0].stderr
    assert f"tools/list of protocol {MODERN} {FAST}" in http_pair[0].stderr
    assert FAST not in http_pair[1].stderr


# ------------------------------------------------------------------ streamable HTTP, host sessions

HANDSHAKE: Final = "2025-11-25"


def session_headers(session: str | None = None, **more: str) -> dict[str, str]:
    headers = {
        "Authorization": f"Bearer {TOKEN}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": HANDSHAKE,
    }
    if session is not None:
        headers["Mcp-Session-Id"] = session
    return {**headers, **more}


async def open_session(
    client: httpx2.AsyncClient, url: str, capabilities: dict[str, Any] | None = None
) -> str:
    """A host session of the handshake era, initialized: its id."""
    params = {
        "protocolVersion": HANDSHAKE,
        "capabilities": capabilities or {},
        "clientInfo": {"name": "raw", "version": "0"},
    }
    body = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params}
    response = await client.post(url, content=json.dumps(body), headers=session_headers())
    assert response.status_code == 200, response.text
    session = response.headers["mcp-session-id"]
    done = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    response = await client.post(url, content=json.dumps(done), headers=session_headers(session))
    assert response.status_code == 202, response.text
    return session


def events(text: str) -> list[dict[str, str]]:
    """The events of an event stream's body: each one's fields."""
    found: list[dict[str, str]] = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        fields = dict(
            line.split(": ", 1) if ": " in line else (line.rstrip(":"), "")
            for line in block.split("\n")
            if line
        )
        if fields:
            found.append(fields)
    return found


async def session_post(
    client: httpx2.AsyncClient, url: str, body: dict[str, Any], session: str
) -> tuple[int, str, list[Any], list[str]]:
    """Status, "json" or "sse", the messages (an event stream's: its events' data), and the events' ids."""
    response = await client.post(url, content=json.dumps(body), headers=session_headers(session))
    kind = response.headers.get("content-type", "")
    assert response.headers.get("mcp-session-id") == session
    if kind.startswith("application/json"):
        return response.status_code, "json", [response.json()], []
    assert kind.startswith("text/event-stream"), (kind, response.text)
    sent = events(response.text)
    data = [json.loads(event["data"]) for event in sent if event.get("data")]
    return response.status_code, "sse", data, [event["id"] for event in sent if "id" in event]


def handshake_call(name: str, arguments: dict[str, Any] | None, **meta: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name}
    if arguments is not None:
        params["arguments"] = arguments
    if meta:
        params["_meta"] = meta
    return {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}


async def test_http_session_requests_are_answered_as_the_sdk_answers_them(
    http_pair: tuple[HttpFacade, HttpFacade],
) -> None:
    cases: list[tuple[str, dict[str, Any]]] = [
        ("a listing", {"jsonrpc": "2.0", "id": 6, "method": "tools/list"}),
        *[(what, handshake_call(name, arguments)) for what, (name, arguments) in CALLS.items()],
        ("progress", handshake_call("mcp_t_progress", {"count": 2}, progressToken=1)),  # left to the SDK
    ]
    kinds: list[str] = []
    async with httpx2.AsyncClient(timeout=HOST_TIMEOUT) as client:
        with trio.fail_after(HOST_TIMEOUT):
            sessions = [await open_session(client, facade.url) for facade in http_pair]
        for what, body in cases:
            with trio.fail_after(HOST_TIMEOUT):
                fast, sdk = [
                    await session_post(client, facade.url, body, session)
                    for facade, session in zip(http_pair, sessions, strict=True)
                ]
            assert fast[0] == sdk[0] == 200, what
            assert len(sdk[3]) == 1 + len(sdk[2]), what  # the SDK's: a priming event, then each message
            if what == "progress":  # the SDK's on both; the notifications' count is the worker's coalescing
                assert fast[1] == "sse" and fast[2][-1] == sdk[2][-1], what
                continue
            kinds.append(fast[1])  # answered within PRIME_AFTER: JSON; later (a loaded machine): a stream
            assert fast[2] == sdk[2], what
    assert "json" in kinds
    assert f"tools/call of protocol {HANDSHAKE} {FAST}" in http_pair[0].stderr
    assert f"tools/list of protocol {HANDSHAKE} {FAST}" in http_pair[0].stderr
    assert FAST not in http_pair[1].stderr


async def test_a_session_host_that_lost_the_stream_of_a_fast_answer_gets_it_replayed(
    http_pair: tuple[HttpFacade, HttpFacade],
) -> None:
    fast = http_pair[0]
    async with httpx2.AsyncClient(timeout=HOST_TIMEOUT) as client:
        with trio.fail_after(HOST_TIMEOUT):
            session = await open_session(client, fast.url)
            listing = {"jsonrpc": "2.0", "id": 6, "method": "tools/list"}
            await session_post(client, fast.url, listing, session)  # the first waits for the supervisor's
            # a call that takes a while: its stream is primed before the answer comes
            _, kind, [answer], [priming, _] = await session_post(
                client, fast.url, handshake_call("mcp_t_slow", {"seconds": 0.3, "tag": "again"}), session
            )
            assert kind == "sse" and answer["result"]["content"][0]["text"] == "done again"
            # As if the stream had broken after its priming event: the host resumes from it (a raw GET,
            # read until the replayed answer is in: the resumed stream stays open for more).
            url = httpx2.URL(fast.url)
            headers = {**session_headers(session), "Last-Event-ID": priming, "Host": f"{url.host}:{url.port}"}
            head = f"GET {url.path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
            stream = await trio.open_tcp_stream(url.host, url.port)
            async with stream:
                await stream.send_all(head.encode() + b"\r\n")
                text = ""
                while '"done again"' not in text or not text.replace("\r\n", "\n").endswith("\n\n"):
                    chunk = await stream.receive_some()
                    assert chunk, f"the stream ended before the answer was replayed: {text!r}"
                    text += chunk.decode()
    status, _, body = text.partition("\r\n\r\n")
    assert status.startswith("HTTP/1.1 200"), status
    # chunked: each event is a chunk of its own, its lines whole
    [replayed] = [json.loads(line[6:]) for line in body.split("\r\n") if line.startswith("data: {")]
    assert replayed == answer
    assert f"tools/call of protocol {HANDSHAKE} {FAST}" in fast.stderr


async def test_a_session_whose_host_may_be_asked_has_its_calls_made_the_sdks_way(
    sup: SupervisorProcess, tmp_path: Path
) -> None:
    facade = HttpFacade(tmp_path, sup.endpoint, TOKEN, "--log-level", "debug")
    try:
        async with httpx2.AsyncClient(timeout=HOST_TIMEOUT) as client:
            with trio.fail_after(HOST_TIMEOUT):
                session = await open_session(client, facade.url, {"sampling": {}})
                _, _, [answer], _ = await session_post(
                    client, facade.url, handshake_call("mcp_t_echo", {"text": "asked"}), session
                )
                unknown = await client.post(
                    facade.url,
                    content=json.dumps(handshake_call("mcp_t_echo", {"text": "x"})),
                    headers=session_headers("no-such-session"),
                )
        assert answer["result"]["content"][0]["text"] == "asked"
        assert unknown.status_code == 404  # the SDK's answer to a session it does not know
        assert FAST not in facade.stderr
    finally:
        facade.stop()


async def until_exists(path: Path) -> None:
    with trio.fail_after(HOST_TIMEOUT):
        while not path.exists():  # noqa: ASYNC110, ASYNC240 - a file the server writes, polled with a bound
            await trio.sleep(0.02)


async def cancelled_call(
    client: httpx2.AsyncClient, facade: HttpFacade, sup: SupervisorProcess, tag: str
) -> tuple[int, list[Any]]:
    """A slow call in a new session, cancelled by its host once the server has it: its stream's end."""
    session = await open_session(client, facade.url)
    await session_post(client, facade.url, {"jsonrpc": "2.0", "id": 6, "method": "tools/list"}, session)
    call = handshake_call("mcp_t_slow", {"seconds": 60, "tag": tag})
    ended: list[tuple[int, str, list[Any], list[str]]] = []

    async def slow() -> None:
        ended.append(await session_post(client, facade.url, call, session))

    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": call["id"]}}
    with trio.fail_after(HOST_TIMEOUT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(slow)
            await until_exists(sup.state_dir / f"{tag}.started")
            said = await client.post(facade.url, content=json.dumps(cancel), headers=session_headers(session))
            assert said.status_code == 202
            await until_exists(sup.state_dir / f"{tag}.cancelled")
    [(status, _, data, _)] = ended
    return status, data


async def test_a_session_call_the_host_cancels_is_cancelled_at_the_server_and_ends_as_the_sdks_does(
    http_pair: tuple[HttpFacade, HttpFacade], sup: SupervisorProcess
) -> None:
    async with httpx2.AsyncClient(timeout=HOST_TIMEOUT) as client:
        fast = await cancelled_call(client, http_pair[0], sup, "http-cancel-fast")
        sdk = await cancelled_call(client, http_pair[1], sup, "http-cancel-sdk")
    assert fast == sdk
    assert fast[1][-1]["error"]["message"] == "Request cancelled"
    assert f"tools/call of protocol {HANDSHAKE} {FAST}" in http_pair[0].stderr
