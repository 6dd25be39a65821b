"""The wire protocol's specification (``docs/protocol.md``) held to the code: its message, error-code,
topic and enum tables are rendered from this package's structs, and checked against them.

Above: ``docs/protocol.md``, whose tables sit between marker comments (``<!-- spec:KIND NAME -->``
before a table, ``<!-- /spec -->`` after it), and ``tests/unit/test_protocol_spec.py``, which holds
the committed file to ``check``. Below: the front and event messages of this package, read through
``msgspec.inspect`` as a ``Model`` (``Model.of_code()``; a test may build a modified one).

A message's table has one row per field, in wire order: its name on the wire, its msgpack type, its
default (``required`` when it has none) and its meaning. All but the meaning is rendered from the
code; meanings are written by hand, and ``update`` keeps them when it rewrites a table (a new field
gets an empty one, which ``check`` reports). Tables of other kinds (``spec:limits``,
``spec:client``, ``spec:exchanges``) are written by hand and checked by the tests: their values live
outside this package, which depends on nothing but msgspec.

    python -m supervisor.protocol.spec docs/protocol.md           # rewrite the tables from the code
    python -m supervisor.protocol.spec --check docs/protocol.md   # say what differs; exit 1 if anything
"""

from __future__ import annotations

import argparse
import re
import sys
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec
import msgspec.inspect as mi

from supervisor.protocol import payloads as payload_structs
from supervisor.protocol.codec import ErrorCode, WorkerState
from supervisor.protocol.control import LogStream
from supervisor.protocol.events import EVENT_TOPICS, Event
from supervisor.protocol.front import FrontReply, FrontRequest

__all__ = ["Model", "Row", "Table", "check", "expected_tables", "hex_examples", "main", "parse", "update"]

UNIONS: typing.Final = ("request", "reply", "event")  # the kinds of tagged message, one union each
_FIELDS: typing.Final = ("field", "type", "default", "meaning")
# Structs that travel encoded inside a relayed (msgspec.Raw) field: CallResult.result, Listing.parts.
_RELAYED: typing.Final = (
    "ToolResult ResourceResult PromptResult ResourceInfo ResourceTemplateInfo PromptInfo Completion"
)
_MARKED = re.compile(r"<!-- spec:(?P<key>[a-z]+(?: [A-Za-z]+)?) -->\n(?P<body>.*?)<!-- /spec -->", re.DOTALL)
_CELL_SPLIT = re.compile(r"(?<!\\)\|")

Struct = type[msgspec.Struct]


@dataclass(frozen=True)
class Model:
    """What the spec's generated tables describe: the messages of each union, the structs carried
    encoded inside a relayed (``msgspec.Raw``) field, the error codes, the event topics, and the
    string enums by name (values in their declared order)."""

    unions: Mapping[str, tuple[Struct, ...]]
    relayed: tuple[Struct, ...]
    error_codes: tuple[str, ...]
    topics: Mapping[type, bytes]
    enums: Mapping[str, tuple[str, ...]]

    @classmethod
    def of_code(cls) -> Model:
        return cls(
            unions={
                "request": typing.get_args(FrontRequest),
                "reply": typing.get_args(FrontReply),
                "event": typing.get_args(Event),
            },
            relayed=tuple(getattr(payload_structs, name) for name in _RELAYED.split()),
            error_codes=typing.get_args(ErrorCode),
            topics={event: topic for event, topic in EVENT_TOPICS.items()},
            enums={"WorkerState": typing.get_args(WorkerState), "LogStream": typing.get_args(LogStream)},
        )

    def payloads(self) -> list[Struct]:
        """Every untagged struct a message carries (directly, or encoded in a relayed field)."""
        found: dict[Struct, None] = {}

        def walk(info: mi.Type) -> None:
            match info:
                case mi.StructType(cls=cls, fields=fields):
                    if info.tag is None and cls not in found:
                        found[cls] = None
                    for field in fields:
                        walk(field.type)
                case mi.ListType(item_type=item):
                    walk(item)
                case mi.UnionType(types=types):
                    for member in types:
                        walk(member)
                case mi.DictType(key_type=key, value_type=value):
                    walk(key)
                    walk(value)

        for kind in UNIONS:
            for message in self.unions[kind]:
                walk(mi.type_info(message))
        for relayed in self.relayed:
            walk(mi.type_info(relayed))
        return list(found)


@dataclass(frozen=True)
class Row:
    """One table row: its key (the first cell), the cells rendered from the code, and its meaning
    (``fixed``: rendered too, not written by hand)."""

    key: str
    cells: tuple[str, ...]
    meaning: str = ""
    fixed: bool = False


@dataclass(frozen=True)
class Table:
    header: tuple[str, ...]
    rows: tuple[Row, ...]

    def render(self) -> str:
        lines = [_line(self.header), "|" + "---|" * len(self.header)]
        lines += [_line((row.key, *row.cells, row.meaning)) for row in self.rows]
        return "\n".join(lines) + "\n"


def _line(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


# ------------------------------------------------------------------ rendering the code


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


def _bounds(info: mi.IntType | mi.FloatType) -> str:
    if info.ge is not None and info.le is not None:
        return f" ({_number(info.ge)} to {_number(info.le)})"
    marks = [(">", info.gt), (">=", info.ge), ("<", info.lt), ("<=", info.le)]
    bounds = ", ".join(f"{mark} {_number(value)}" for mark, value in marks if value is not None)
    return f" ({bounds})" if bounds else ""


def _lengths(info: mi.StrType | mi.ListType, unit: str) -> str:
    low, high = info.min_length, info.max_length
    if low is None and high is None:
        return ""
    return f" ({low or 0} to {high} {unit})" if high is not None else f" (at least {low} {unit})"


def render_type(info: mi.Type, enums: Mapping[str, tuple[str, ...]]) -> str:
    """A type as the spec writes it: msgpack's own kinds, payload structs and enums by name (linked)."""
    match info:
        case mi.Metadata(type=mi.StrType(pattern=None), extra={"open_enum": str(name)}) if name in enums:
            return f"str: a {_link(name)}, or one a newer version adds"
        case mi.IntType():
            return "int" + _bounds(info)
        case mi.FloatType():
            return "float" + _bounds(info)
        case mi.StrType(pattern=None):
            return "str" + _lengths(info, "characters")
        case mi.BoolType():
            return "bool"
        case mi.NoneType():
            return "nil"
        case mi.AnyType() | mi.RawType():
            return "any"
        case mi.UnionType(types=types):
            return " or ".join(render_type(member, enums) for member in types)
        case mi.ListType(item_type=item):
            return f"array of {render_type(item, enums)}" + _lengths(info, "items")
        case mi.DictType(key_type=mi.StrType(), value_type=mi.AnyType(), min_length=None, max_length=None):
            return "map"
        case mi.LiteralType(values=values):
            for name, members in enums.items():
                if set(members) == set(values):
                    return _link(name)
            return "str: " + ", ".join(f'`"{value}"`' for value in values)
        case mi.StructType(cls=cls, tag=None):
            return _link(cls.__name__)
    raise TypeError(f"the spec has no way to write the type {info!r}: teach supervisor.protocol.spec")


def _link(name: str) -> str:
    return f"[{name}](#{name.lower()})"


def render_default(field: mi.Field) -> str:
    if field.required:
        return "required"
    value = field.default_factory() if field.default is msgspec.NODEFAULT else field.default
    if isinstance(value, msgspec.Raw):
        value = msgspec.msgpack.decode(value)
    return "`nil`" if value is None else f"`{msgspec.json.encode(value).decode()}`"


def _struct_table(cls: Struct, enums: Mapping[str, tuple[str, ...]]) -> Table:
    info = mi.type_info(cls)
    assert isinstance(info, mi.StructType)
    rows = []
    if info.tag_field is not None:
        tag = f'always `"{info.tag}"`: the message\'s tag'
        rows.append(Row(f"`{info.tag_field}`", ("str", "required"), tag, fixed=True))
    for field in info.fields:
        key = f"`{field.encode_name}`"
        if field.encode_name != field.name:
            key += f" (`{field.name}` in Python)"
        rows.append(Row(key, (render_type(field.type, enums), render_default(field))))
    return Table(_FIELDS, tuple(rows))


def expected_tables(model: Model) -> dict[str, Table]:
    """Every table the spec must have, by marker key, with empty meanings where a hand writes them."""
    tables: dict[str, Table] = {}
    for kind in UNIONS:
        for message in model.unions[kind]:
            info = mi.type_info(message)
            assert isinstance(info, mi.StructType) and info.tag is not None, f"{message} is not tagged"
            tables[f"{kind} {info.tag}"] = _struct_table(message, model.enums)
    for payload in model.payloads():
        tables[f"payload {payload.__name__}"] = _struct_table(payload, model.enums)
    codes = tuple(Row(f"`{code}`", ()) for code in model.error_codes)
    tables["errors"] = Table(("code", "meaning"), codes)
    topics = [Row(f"`{topic.decode()}`", (_link(event.__name__),)) for event, topic in model.topics.items()]
    tables["topics"] = Table(("topic", "event", "meaning"), tuple(topics))
    for name, values in model.enums.items():
        tables[f"enum {name}"] = Table(
            ("value", "meaning"), tuple(Row(f'`"{value}"`', ()) for value in values)
        )
    return tables


# ------------------------------------------------------------------ reading the spec


def parse(text: str) -> dict[str, list[Table]]:
    """Every marked table of the spec by its marker key (a list: a key may be marked twice, wrongly)."""
    tables: dict[str, list[Table]] = {}
    for match in _MARKED.finditer(text):
        lines = [line.strip() for line in match["body"].splitlines() if line.strip().startswith("|")]
        cells = [tuple(cell.strip() for cell in _CELL_SPLIT.split(line.strip("|"))) for line in lines]
        header, body = (cells[0], cells[2:]) if cells else ((), [])
        rows = tuple(Row(row[0], row[1:-1], row[-1]) for row in body if row)
        tables.setdefault(match["key"], []).append(Table(header, rows))
    return tables


def hex_examples(text: str) -> dict[str, list[bytes]]:
    """The spec's examples of bytes on the wire (``<!-- spec:hex NAME -->``, a code block of hex
    bytes, each line's comment after ``#``), by name: the frames of each (a comment that begins
    ``frame`` begins a new frame). Raises ``ValueError`` naming an example that is not hex."""
    examples: dict[str, list[bytes]] = {}
    for match in _MARKED.finditer(text):
        kind, _, name = match["key"].partition(" ")
        if kind != "hex":
            continue
        frames = [b""]
        for line in match["body"].splitlines():
            if line.startswith("```"):
                continue
            data, _, comment = line.partition("#")
            if comment.lstrip().startswith("frame") and frames[-1]:
                frames.append(b"")
            try:
                frames[-1] += bytes.fromhex(data)
            except ValueError:
                raise ValueError(
                    f"the spec's example {name!r} has a line that is not hex: {line!r}"
                ) from None
        examples[name] = frames
    return examples


def _generated(key: str) -> bool:
    return key.split(" ")[0] in (*UNIONS, "payload", "errors", "topics", "enum")


def check(text: str, model: Model) -> list[str]:
    """Every way the spec's generated tables differ from the code (empty: they agree)."""
    found, wanted = parse(text), expected_tables(model)
    problems = [
        f"the spec marks {key!r} {len(tables)} times" for key, tables in found.items() if len(tables) > 1
    ]
    for key, table in wanted.items():
        if key not in found:
            problems.append(
                f"{key}: no table in the spec; add `<!-- spec:{key} -->` and `<!-- /spec -->` where it "
                "belongs, then run `python -m supervisor.protocol.spec docs/protocol.md`"
            )
        else:
            problems += _compare(key, table, found[key][0])
    problems += [
        f"{key}: the spec has a table of it, the code has no such {key.split(' ')[0]}"
        for key in found
        if _generated(key) and key not in wanted
    ]
    return problems


def _compare(key: str, code: Table, spec: Table) -> list[str]:
    if spec.header != code.header:
        return [f"{key}: the table's columns are {spec.header}, not {code.header}"]
    problems: list[str] = []
    in_code, in_spec = {row.key: row for row in code.rows}, {row.key: row for row in spec.rows}
    if len(in_spec) != len(spec.rows):
        problems.append(f"{key}: a row is in the table twice")
    problems += [f"{key}: {row} is in the code, not in the spec" for row in in_code if row not in in_spec]
    problems += [f"{key}: {row} is in the spec, not in the code" for row in in_spec if row not in in_code]
    shared = [row for row in in_code if row in in_spec]
    if shared != [row for row in in_spec if row in in_code]:
        problems.append(f"{key}: the rows are in another order than in the code: {', '.join(shared)}")
    for name in shared:
        mine, theirs = in_code[name], in_spec[name]
        if len(theirs.cells) != len(mine.cells):
            problems.append(
                f"{key}: {name}: the row has {len(theirs.cells) + 2} cells, not {len(code.header)}"
            )
            continue
        for column, want, have in zip(code.header[1:-1], mine.cells, theirs.cells, strict=True):
            if want != have:
                problems.append(f"{key}: {name}: {column} is {want} in the code, {have} in the spec")
        if mine.fixed and theirs.meaning != mine.meaning:
            problems.append(f"{key}: {name}: the meaning must be {mine.meaning}")
        if not theirs.meaning:
            problems.append(f"{key}: {name}: no meaning written")
    return problems


def update(text: str, model: Model) -> str:
    """The spec with every marked table it has rendered from the code, keeping hand-written meanings."""
    wanted = expected_tables(model)

    def rewrite(match: re.Match[str]) -> str:
        key = match["key"]
        if key not in wanted:
            return match[0]
        old = parse(match[0]).get(key, [Table((), ())])[0]
        meanings = {row.key: row.meaning for row in old.rows}
        rows = (
            row if row.fixed else Row(row.key, row.cells, meanings.get(row.key, ""))
            for row in wanted[key].rows
        )
        return f"<!-- spec:{key} -->\n{Table(wanted[key].header, tuple(rows)).render()}<!-- /spec -->"

    return _MARKED.sub(rewrite, text)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m supervisor.protocol.spec",
        description="Render the wire protocol spec's tables from the code, or check them.",
    )
    parser.add_argument("path", nargs="?", default="docs/protocol.md", help="the spec (default: %(default)s)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if the spec differs")
    args = parser.parse_args(argv)
    path, model = Path(args.path), Model.of_code()
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        print(f"cannot read {path}: {exc}", file=sys.stderr)
        return 2
    if not args.check:
        updated = update(text, model)
        if updated != text:
            path.write_text(updated, encoding="utf-8")
            print(f"{path}: tables rewritten from the code")
        text = updated
    problems = check(text, model)
    for problem in problems:
        print(f"{path}: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
