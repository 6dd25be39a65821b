"""The zygote: a pre-imported process that forks workers in milliseconds.

A fresh worker interpreter spends a fraction of a second of CPU importing trio, msgspec and
its own code (a remote worker: the MCP SDK and the HTTP stack too, about a second), and holds tens
of MB of its own. The supervisor instead starts a zygote, which imports all of that once, runs what
every worker runs once (``warm``), calls ``gc.freeze()`` (so the collector never writes to the
shared pages), takes the free blocks of its allocator's partly used pools (``workers.pools``: a
worker's new objects then go to pages of its own, not into holes among the shared ones), offers its
memory to the kernel's same-page merging (``merge_identical_pages``: pages the workers copy alike
are folded back into one where KSM runs), and then forks a worker per request. Nothing here keeps
trio or ZeroMQ state: the warm-up's event loops are over before the first fork, and a worker
creates its own loop and socket after it.

There are two kinds, each with its own preload, because on CPython a forked worker copies every page
whose objects it touches (reference counts, specialised bytecode): the fewer modules a worker runs
through, the fewer pages it dirties, and the smaller the zygote image every worker shares.

- ``python -m workers --zygote`` forks stdio workers and imports ``PRELOAD``: the worker's own MCP
  client (``workers.lean``), trio and msgspec, but not pyzmq (a worker speaks ZMTP itself on its
  ipc link: ``supervisor.shared.zmtp_dealer``), the MCP SDK, pydantic, anyio or the HTTP stack,
  which a stdio worker never loads (some of the SDK's models load lazily, in the one
  worker that needs them: ``workers.lean_sdk``), nor ``jsonschema``, which a worker imports only for
  a schema or arguments ``supervisor.shared.instance_quick`` does not prove valid;
- ``python -m workers --zygote remote`` forks remote workers and imports ``REMOTE_PRELOAD`` as well:
  the SDK's client, its transports, anyio's trio backend and ``jsonschema``. The supervisor starts
  it at the first remote worker (``supervisor.daemon.servers.spawn``): a config without remote
  servers never has it.

The supervisor talks to the zygote over a ``SOCK_SEQPACKET`` socket, the zygote's stdin:

- ready: the zygote sends ``ready`` once its imports are done;
- request: the server name, with two descriptors attached (``SCM_RIGHTS``):
  the worker's stdin (its lifeline) and stderr (its log), as the supervisor's
  pipes;
- reply: the worker's pid in decimal, or ``error: <why>``.

Each worker is forked twice (the middle process exits at once), so it is
re-parented to the supervisor, a child subreaper: the supervisor is its real
parent, reaps it and reads its exit status, exactly as for a worker it
started with ``exec``. End-of-file on the socket (the supervisor is gone)
ends the zygote; workers already forked watch their own lifelines.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import os
import random
import signal
import socket
import sys
import traceback
from typing import Final, NoReturn

import msgspec
import trio
import trio.lowlevel

from supervisor.shared.boot import WorkerExit
from supervisor.shared.processes import merge_identical_pages, set_process_name
from workers import pools

__all__ = ["PRELOAD", "REMOTE_PRELOAD", "ZYGOTE_FD", "main"]

ZYGOTE_FD: Final = 0  # the supervisor's socket is our stdin
MAX_REQUEST: Final = 4096  # bytes of a request (a server name)
WARM_ROUNDS: Final = 10  # past the interpreter's threshold for specialising bytecode

# What a stdio worker imports, at start and while it runs (trio's process and signal handling).
PRELOAD: Final = (
    "workers.worker",
    "trio._subprocess_platform.waitid",
)
# What a remote worker imports besides, while it runs (not at import time): the SDK's client, the
# transports, the HTTP stack, and anyio's trio backend. Importing them here keeps them shared; a name
# missing from an installed version is skipped.
REMOTE_PRELOAD: Final = (
    *PRELOAD,
    "workers.sdk",
    "workers.oauth",
    "jsonschema.validators",
    "referencing.exceptions",
    "anyio._backends._trio",
    "anyio._core._sockets",
    "anyio._core._streams",
    "anyio.streams.stapled",
    "anyio.streams.tls",
    "encodings.idna",
    "stringprep",
    "h11",
    "httpcore2",
    "truststore",
)


def preload(names: tuple[str, ...] = PRELOAD) -> None:
    for name in names:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)


def warm() -> None:
    """Run, once, what every worker runs on every server: checking a tool's schema and arguments,
    decoding the server's lines and results, encoding what goes to the supervisor, trio's event
    loop, and msgspec's view of every message type. What that creates once (caches, compiled
    patterns, msgspec's type info, which it would otherwise build in each worker through
    ``typing``) and the bytecode CPython specialises as it runs are then the zygote's, shared,
    instead of each worker's own copy. ``jsonschema``'s validators are warmed where they are loaded
    (the remote zygote): a stdio worker proves common arguments valid without them."""
    _warm_types()
    for _ in range(WARM_ROUNDS):
        trio.run(_event_loop_round)
    from supervisor.protocol import InvokeResult, ToolResult, encode
    from supervisor.shared.schemas import Validators, schema_problem, validator
    from workers.listing import _page_of
    from workers.messages import decode_message
    from workers.results import decode_tool_result
    from workers.values import decode_arguments, json_problem

    schema = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
    referring = {"$defs": {"text": {"type": "string"}}, "properties": {"text": {"$ref": "#/$defs/text"}}}
    checks = Validators({"t": schema})
    for _ in range(WARM_ROUNDS):
        schema_problem(schema)
        schema_problem(referring)
        checks.proves("t", {"text": "x"})
        if "jsonschema" in sys.modules:
            check = validator(dict(schema))
            assert check is not None
            check.is_valid({"text": "x"})
            list(check.iter_errors({"text": 1}))
        decode_message(
            b'{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":1}}'
        )
        _page_of(msgspec.Raw(b'{"tools":[{"name":"t","inputSchema":{"type":"object"}}]}'), "tools")
        json_problem({"name": "t", "inputSchema": schema}, 64, "its fields")
        result = decode_tool_result(b'{"content":[{"type":"text","text":"x"}],"isError":false}')
        assert result is not None
        encode(InvokeResult(call=1, result=msgspec.Raw(encode(ToolResult(content=[], text="")))))
        decode_arguments(msgspec.msgpack.encode({"text": "x"}))


def _warm_types() -> None:
    """Have msgspec build its type info for every message type loaded (it keeps it on the class)."""
    classes: list[type[msgspec.Struct]] = [msgspec.Struct]
    for cls in classes:
        classes.extend(cls.__subclasses__())
    for cls in classes[1:]:
        with contextlib.suppress(Exception):  # a generic or unresolvable one: built where it is used
            msgspec.msgpack.Decoder(cls)
            msgspec.json.Decoder(cls)


async def _event_loop_round() -> None:
    """What a worker's event loop does all the time: tasks, channels, cancel scopes, deadlines."""
    send, receive = trio.open_memory_channel[int](1)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(receive.receive)
        with trio.move_on_after(60):
            await send.send(1)
        event = trio.Event()
        nursery.start_soon(event.wait)
        await trio.lowlevel.checkpoint()
        event.set()


def _become_worker(sock: socket.socket, fds: list[int], name: str) -> NoReturn:
    """In the forked worker: take the lifeline and log pipes as stdin and stderr, then run it."""
    code: int = WorkerExit.CRASHED  # should main() itself raise
    try:
        sock.close()
        os.dup2(fds[0], 0)
        os.dup2(fds[1], 2)
        for fd in fds:
            os.close(fd)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        random.seed()  # not the zygote's sequence
        sys.argv = [sys.argv[0], name]  # as an exec'd worker has it (``supervisor.shared.boot.worker_argv``)
        set_process_name(f"mcp-w {name}")
        from workers.worker import main

        code = main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        with contextlib.suppress(Exception):
            traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def _fork_worker(sock: socket.socket, fds: list[int], name: str) -> bytes:
    """Fork twice; the reply for the supervisor: the worker's pid, or an error."""
    if len(fds) != 2:
        return f"error: expected 2 descriptors, got {len(fds)}".encode()
    r, w = os.pipe()
    try:
        middle = os.fork()
    except OSError as exc:
        os.close(r)
        os.close(w)
        return f"error: fork failed: {exc}".encode()
    if middle == 0:  # the middle process: fork the worker, say its pid, exit so it is re-parented
        status = 0
        try:
            os.close(r)
            pid = os.fork()
            if pid == 0:
                os.close(w)
                _become_worker(sock, fds, name)
            os.write(w, str(pid).encode())
        except BaseException as exc:
            with contextlib.suppress(OSError):
                os.write(w, f"error: fork failed: {exc}".encode())
            status = 1
        os._exit(status)
    os.close(w)
    chunks = []
    while chunk := os.read(r, 256):
        chunks.append(chunk)
    os.close(r)
    os.waitpid(middle, 0)
    return b"".join(chunks) or b"error: the forking process died"


def serve(sock: socket.socket) -> int:
    sock.send(b"ready")
    while True:
        try:
            message, fds, _flags, _addr = socket.recv_fds(sock, MAX_REQUEST, 2)
        except ConnectionResetError:
            return 0
        if not message:  # the supervisor closed its end
            for fd in fds:
                os.close(fd)
            return 0
        try:
            reply = _fork_worker(sock, fds, message.decode(errors="replace"))
        finally:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
        try:
            sock.send(reply)
        except OSError:
            return 0


def main(kind: str = "stdio") -> int:
    """``kind``: ``stdio`` or ``remote``, the workers this zygote forks (see the module)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the supervisor's to handle; EOF ends us
    set_process_name("mcp-zygote" if kind == "stdio" else "mcp-zygote-http")  # 15 bytes at most
    sock = socket.socket(fileno=ZYGOTE_FD)
    preload(REMOTE_PRELOAD if kind == "remote" else PRELOAD)
    warm()
    gc.collect()
    gc.freeze()  # everything imported so far lives in the shared pages; the collector leaves it alone
    pools.fill()  # a worker's new objects go to pages of its own, not into holes among the shared ones
    merge_identical_pages()  # inherited by every fork: the pages workers copy alike are folded back into one
    return serve(sock)
