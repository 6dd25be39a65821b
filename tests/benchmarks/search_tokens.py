"""Benchmark: how much of a model's context the tool definitions take through the facade, the whole
registry (`mcp-supervisor mcp`) against `mcp-supervisor mcp --search` (two tools), on 300+ tools;
and whether the search finds the right tool.

    .venv/bin/python -m tests.benchmarks.search_tokens [--copies N] [--extra N] [--tokenizer FILE]
        [--json PATH]

One supervisor runs these stdio servers:
  everything          the npm reference server server-everything (Node)
  time                mcp-server-time (PyPI), real tools with real descriptions
  git                 mcp-server-git (PyPI) on this repository, real tools with real descriptions
  test1 .. testN      tests/servers/mcp_test_server.py with TEST_SERVER_EXTRA_TOOLS (--copies of it,
                      --extra tools each: its own tools plus extra_0 .. extra_{N-1}, "Extra echo tool
                      #i." each), to pass 300 tools; their definitions are shorter than real ones,
                      so they make the saving look smaller, not larger

A host talks to each facade over stdio the way any MCP host does (raw JSON-RPC lines: initialize on
2025-11-25, notifications/initialized, tools/list, tools/call), and what is measured is the JSON it
receives: the `tools` array of tools/list (compact JSON, as the facade sends it), and the result of
one search_tools call (content and structuredContent; and its text content alone, which is all some
hosts show the model).

Tokens: no tokenizer of a current model ships its vocabulary inside a PyPI wheel (tiktoken downloads
its encodings at first use; `tokenizers` and `transformers` download theirs from the Hugging Face
hub), so tokens are estimated as UTF-8 bytes / 4, a common rule of thumb for English text and JSON.
With --tokenizer FILE (a Hugging Face `tokenizer.json`; needs the `tokenizers` package) the same JSON
is also counted with that tokenizer, e.g. the one the `anthropic` wheel bundled up to 0.38.0
(anthropic/tokenizer.json: Anthropic's tokenizer before Claude 3, which Anthropic says is not
accurate for later models), which gives a real tokenizer's count to check the estimate against.

Quality: for a few requests as a model would phrase them, the top 3 names search_tools returns, and
whether a tool that does it is among them. Not a test: pytest only collects test_*.py.
"""

from __future__ import annotations

import argparse
import json
import queue
import re
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from supervisor.client.blocking import SupervisorClient
from tests.benchmarks.common import (
    EVERYTHING,
    NODE,
    REPO,
    TEST_SERVER,
    launch_supervisor,
    log_problems,
    machine_info,
    stop_process,
    stop_supervisor,
    wait_ready,
    write_json,
)

RESULTS = REPO / "tests/benchmarks/results"
REQUEST_TIMEOUT = 60.0  # seconds for one request to the facade (the first listing waits for the supervisor)
PROTOCOL = "2025-11-25"
BYTES_PER_TOKEN = 4
TYPICAL_QUERY, TYPICAL_LIMIT = "current time in a timezone", 10
# Requests as a model would phrase them, and the tools that do them (a pattern on the prefixed name).
QUERIES: list[tuple[str, str]] = [
    ("what time is it in Tokyo", r"mcp_time_get_current_time"),
    ("show git log", r"mcp_git_git_log"),
    ("add two numbers", r"mcp_everything_get-sum|mcp_test\d+_add"),
    ("echo a message back", r"mcp_everything_echo|mcp_test\d+_echo"),
    ("list the changes staged for commit", r"mcp_git_git_diff_staged|mcp_git_git_status"),
    ("convert 3pm London time to New York", r"mcp_time_convert_time"),
]


def servers(copies: int, extra: int) -> dict[str, Any]:
    config: dict[str, Any] = {
        "everything": {"command": str(NODE), "args": [str(EVERYTHING), "stdio"]},
        "time": {"command": sys.executable, "args": ["-m", "mcp_server_time"]},
        "git": {"command": sys.executable, "args": ["-m", "mcp_server_git", "--repository", str(REPO)]},
    }
    for i in range(1, copies + 1):
        config[f"test{i}"] = {
            "command": sys.executable,
            "args": [str(TEST_SERVER)],
            "env": {"TEST_SERVER_EXTRA_TOOLS": str(extra)},
        }
    return config


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class RawHost:
    """An MCP host in a few lines: starts a facade and speaks JSON-RPC to it on its stdin/stdout."""

    def __init__(self, argv: list[str], log: Path) -> None:
        self._log = log.open("wb")
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, cwd=REPO
        )
        self._lines: queue.Queue[bytes | None] = queue.Queue()
        self._next_id = 0
        threading.Thread(target=self._read, daemon=True).start()

    def handshake(self) -> None:
        info = {"name": "bench", "version": "0"}
        self.request("initialize", {"protocolVersion": PROTOCOL, "capabilities": {}, "clientInfo": info})
        self.notify("notifications/initialized")

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(compact({"jsonrpc": "2.0", **message}).encode() + b"\n")
        self.proc.stdin.flush()

    def notify(self, method: str) -> None:
        self._send({"method": method})

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """The result of ``method``; notifications that come first are skipped."""
        self._next_id += 1
        self._send({"id": self._next_id, "method": method, "params": params})
        while True:
            try:
                line = self._lines.get(timeout=REQUEST_TIMEOUT)
            except queue.Empty:
                raise RuntimeError(
                    f"the facade did not answer {method} within {REQUEST_TIMEOUT:g} s"
                ) from None
            if line is None:
                raise RuntimeError(f"the facade exited ({self.proc.poll()}) before answering {method}")
            message = json.loads(line)
            if message.get("id") != self._next_id:
                continue
            if "error" in message:
                raise RuntimeError(f"{method}: {message['error']}")
            result: dict[str, Any] = message["result"]
            return result

    def tools(self) -> list[dict[str, Any]]:
        tools: list[dict[str, Any]] = []
        params: dict[str, Any] = {}
        while True:
            result = self.request("tools/list", params)
            tools += result["tools"]
            if not result.get("nextCursor"):
                return tools
            params = {"cursor": result["nextCursor"]}

    def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return self.request("tools/call", {"name": name, "arguments": arguments})

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()  # a stdio facade ends when its host closes stdin
        try:
            self.proc.wait(10.0)
        except subprocess.TimeoutExpired:
            stop_process(self.proc)
        self._log.close()


def load_tokenizer(path: str | None) -> Callable[[str], int] | None:
    if not path:
        return None
    try:
        from tokenizers import Tokenizer  # type: ignore[import-not-found]
    except ImportError:
        raise SystemExit("--tokenizer needs the `tokenizers` package (pip install tokenizers)") from None
    tokenizer = Tokenizer.from_file(path)

    def count(text: str) -> int:
        return len(tokenizer.encode(text).ids)

    return count


def markdown(header: list[str], rows: list[list[str]], numbers: bool = True) -> None:
    """A markdown table, the first column left-aligned and the others right-aligned (all left-aligned
    unless ``numbers``)."""
    widths = [max(len(c) for c in col) for col in zip(header, *rows, strict=True)]
    for i, line in enumerate([header, ["-" * w for w in widths], *rows]):
        cells = [
            c.ljust(w) if j == 0 or not numbers else c.rjust(w)
            for j, (c, w) in enumerate(zip(line, widths, strict=True))
        ]
        if i == 1:
            cells = [c[:-1] + ":" if j and numbers else c for j, c in enumerate(cells)]
        print("| " + " | ".join(cells) + " |")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--copies", type=int, default=3, help="copies of the test server (default 3)")
    parser.add_argument("--extra", type=int, default=100, help="extra tools in each copy (default 100)")
    parser.add_argument(
        "--tokenizer", help="a tokenizer.json (Hugging Face format) to count tokens with as well"
    )
    parser.add_argument("--json", default=str(RESULTS / "search_tokens.json"), help="'' to write none")
    args = parser.parse_args()
    if args.copies < 0 or args.extra < 0:
        parser.error("--copies and --extra are counts, >= 0")
    for path in (NODE, EVERYTHING, TEST_SERVER):
        if not path.exists():
            raise SystemExit(f"{path} is missing: `bash tests/run.sh` sets up .venv and tests/npm")
    count_tokens = load_tokenizer(args.tokenizer)
    config = servers(args.copies, args.extra)
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bench-search-tokens-") as tmpdir, ExitStack() as stack:
        tmp = Path(tmpdir)
        proc, endpoint = launch_supervisor(config, tmp)
        stack.callback(lambda: stop_supervisor(proc, problems))
        sup = stack.enter_context(SupervisorClient(endpoint, request_timeout=10.0))
        wait_ready(sup, proc, len(config))
        server_of = {t.name: t.server for t in sup.list_tools()}
        registry = len(server_of)
        argv = [sys.executable, "-m", "supervisor", "mcp", "--endpoint", endpoint]
        full_host = RawHost(argv, tmp / "facade-full.log")
        stack.callback(full_host.close)
        full_host.handshake()
        search_host = RawHost([*argv, "--search"], tmp / "facade-search.log")
        stack.callback(search_host.close)
        search_host.handshake()

        full = full_host.tools()
        listed = search_host.tools()
        typical = search_host.call("search_tools", {"query": TYPICAL_QUERY, "limit": TYPICAL_LIMIT})
        found = [t["name"] for t in typical.get("structuredContent", {}).get("tools", [])]
        quality: list[dict[str, Any]] = []
        for query, expected in QUERIES:
            result = search_host.call("search_tools", {"query": query, "limit": 3})
            top = [t["name"] for t in result.get("structuredContent", {}).get("tools", [])]
            hit = next((i + 1 for i, name in enumerate(top) if re.fullmatch(expected, name)), None)
            quality.append({"query": query, "expected": expected, "top3": top, "rank": hit})
        # The call the model makes next, by name through call_tool: does it reach the server?
        call = search_host.call("call_tool", {"name": "mcp_everything_echo", "arguments": {"message": "hi"}})
        stack.close()
        problems += log_problems(tmp)
        for name in ("facade-full.log", "facade-search.log"):
            lines = (tmp / name).read_text(errors="replace").splitlines()
            problems += [f"{name}: {ln}" for ln in lines if re.search(r"\b(ERROR|WARNING|Traceback)\b", ln)]
    if len(full) != registry:
        problems.append(f"the facade listed {len(full)} tools of the supervisor's {registry}")
    if call.get("isError") or "hi" not in compact(call.get("content")):
        problems.append(f"call_tool mcp_everything_echo through --search answered {compact(call)}")

    def sizes(text: str) -> dict[str, int | None]:
        size = len(text.encode())
        return {
            "bytes": size,
            "est_tokens": round(size / BYTES_PER_TOKEN),
            "tokens": count_tokens(text) if count_tokens else None,
        }

    measured = {
        "full: tools/list": (len(full), sizes(compact(full))),
        "--search: tools/list": (len(listed), sizes(compact(listed))),
        f"--search: one search_tools result (limit {TYPICAL_LIMIT})": (len(found), sizes(compact(typical))),
        "  of which its text content": (len(found), sizes(compact(typical.get("content", [])))),
    }
    list_plus = sizes(compact(listed) + compact(typical))
    measured["--search: tools/list + one search"] = (len(listed), list_plus)

    machine = machine_info(copies=args.copies, extra=args.extra, tokenizer=args.tokenizer or "none")
    for key, value in machine.items():
        print(f"{key}: {value}")
    by_server = Counter(server_of.get(t["name"], "?") for t in full)
    print(
        f"registry: {len(full)} tools listed by the facade from {len(config)} servers: "
        + ", ".join(f"{s} {by_server[s]}" for s in config)
    )
    print()
    header = ["listing (JSON a host receives)", "tools", "bytes", f"est. tokens (bytes/{BYTES_PER_TOKEN})"]
    if count_tokens:
        header.append("tokens (--tokenizer)")
    rows = []
    for what, (tools, s) in measured.items():
        row = [what, str(tools), f"{s['bytes']:,}", f"{s['est_tokens']:,}"]
        if count_tokens:
            row.append(f"{s['tokens']:,}")
        rows.append(row)
    markdown(header, rows)
    full_bytes = measured["full: tools/list"][1]["bytes"]
    assert isinstance(full_bytes, int)
    ratios = {
        "full / --search tools/list": full_bytes / len(compact(listed).encode()),
        "full / (--search tools/list + one search)": full_bytes
        / len((compact(listed) + compact(typical)).encode()),
    }
    for what, ratio in ratios.items():
        print(f"ratio {what}: {ratio:.0f}x")
    if count_tokens:
        full_tokens = measured["full: tools/list"][1]["tokens"]
        assert isinstance(full_tokens, int)
        print(f"bytes per token with --tokenizer on the full listing: {full_bytes / full_tokens:.2f}")
    print(
        f"tokens are an ESTIMATE: UTF-8 bytes of the compact JSON / {BYTES_PER_TOKEN}"
        + ("; the --tokenizer column counts them with that tokenizer" if count_tokens else "")
        + "; a host that reformats the definitions for its model sends somewhat different text"
    )
    print(f"search_tools {{query: {TYPICAL_QUERY!r}, limit: {TYPICAL_LIMIT}}} found: {', '.join(found)}")
    per_server: dict[str, list[int]] = {}
    for tool in full:
        per_server.setdefault(server_of.get(tool["name"], "?"), []).append(len(compact(tool).encode()))
    print(
        "bytes per tool definition (mean): "
        + ", ".join(f"{s} {sum(v) / len(v):.0f}" for s in config if (v := per_server.get(s)))
    )
    print()
    hits = sum(1 for q in quality if q["rank"])
    markdown(
        ["query (search_tools, limit 3)", "top 3", "expected", "in top 3"],
        [
            [
                q["query"],
                ", ".join(q["top3"]) or "(none)",
                q["expected"].replace("|", " or "),
                f"yes (#{q['rank']})" if q["rank"] else "NO",
            ]
            for q in quality
        ],
        numbers=False,
    )
    print(f"expected tool in the top 3 for {hits} of {len(quality)} queries")
    for problem in problems:
        print(f"problem: {problem}")
    if args.json:
        data = {
            "machine": machine,
            "servers": {name: {"tools": by_server.get(name, 0)} for name in config},
            "estimate": f"tokens = UTF-8 bytes of compact JSON / {BYTES_PER_TOKEN}",
            "tokenizer": args.tokenizer,
            "measured": {what: {"tools": tools, **s} for what, (tools, s) in measured.items()},
            "ratios": ratios,
            "typical_search": {"query": TYPICAL_QUERY, "limit": TYPICAL_LIMIT, "found": found},
            "quality": quality,
            "problems": problems,
        }
        write_json(Path(args.json), data)
        print(f"json: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
