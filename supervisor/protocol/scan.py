"""Fields read from the top level of a msgpack map that does not decode, without recursion.

Above: the edges that answer a message they could not decode (the front door's ``BAD_REQUEST``,
the worker's answer to a command too deep for msgspec): they still want its ``id`` or ``call``, so
that the peer can match the answer. Below: nothing but msgspec, which decodes the few values
wanted once the scan has found where each one lies.

The scan walks the map's keys and skips every other value with a loop (never recursion), so a
value nested a million levels deep costs no stack. Hostile frames cost bounded time: at most
``MAX_PAIRS`` keys and ``budget`` msgpack items are looked at; past either, the fields found so far
are all there is. It never raises.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

__all__ = ["MAX_PAIRS", "SCAN_BUDGET", "top_level_fields"]

MAX_PAIRS: Final = 64  # keys of the top-level map looked at; a message has a handful of fields
SCAN_BUDGET: Final = 10_000  # msgpack items stepped over at most (a 1000-deep value is about 1000)

# msgpack type bytes beyond the fixed ranges: how many bytes follow; (length width, bytes between the
# length and the payload) for strings, bin and ext; (count width, values per count) for containers.
_MP_FIXED: Final = {
    **{0xCA: 4, 0xCB: 8, 0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8, 0xD0: 1, 0xD1: 2, 0xD2: 4, 0xD3: 8},
    **{0xD4: 2, 0xD5: 3, 0xD6: 5, 0xD7: 9, 0xD8: 17},  # fixext: its type byte, then its data
}
_MP_SIZED: Final = {
    **{0xC4: (1, 0), 0xC5: (2, 0), 0xC6: (4, 0), 0xC7: (1, 1), 0xC8: (2, 1), 0xC9: (4, 1)},
    **{0xD9: (1, 0), 0xDA: (2, 0), 0xDB: (4, 0)},
}
_MP_COUNTED: Final = {0xDC: (2, 1), 0xDD: (4, 1), 0xDE: (2, 2), 0xDF: (4, 2)}
_MP_MAPS: Final = {0xDE: 2, 0xDF: 4}  # map16, map32: their count's width


class _OverBudget(Exception):
    pass


class _Skipper:
    """Steps over whole msgpack values, counting the items it passes against a budget."""

    def __init__(self, data: bytes, budget: int) -> None:
        self.data = data
        self.left = budget

    def skip(self, pos: int) -> int:
        """Where the value at ``pos`` ends; ``ValueError``/``IndexError`` for bytes that are not one
        value, ``_OverBudget`` past the budget."""
        data = self.data
        remaining = 1
        while remaining:
            remaining -= 1
            self.left -= 1
            if self.left < 0:
                raise _OverBudget
            kind = data[pos]
            pos += 1
            if kind <= 0x7F or kind >= 0xE0 or kind in (0xC0, 0xC2, 0xC3):
                continue
            if kind <= 0x8F:
                remaining += 2 * (kind & 0x0F)
            elif kind <= 0x9F:
                remaining += kind & 0x0F
            elif kind <= 0xBF:
                pos += kind & 0x1F
            elif kind in _MP_FIXED:
                pos += _MP_FIXED[kind]
            elif kind in _MP_SIZED:
                width, extra = _MP_SIZED[kind]
                pos += width + extra + int.from_bytes(data[pos : pos + width], "big")
            elif kind in _MP_COUNTED:
                width, per = _MP_COUNTED[kind]
                remaining += per * int.from_bytes(data[pos : pos + width], "big")
                pos += width
            else:
                raise ValueError(f"not msgpack: byte {kind:#x}")
            if pos > len(data):
                raise ValueError("truncated")
        return pos


def top_level_fields(frame: bytes, names: tuple[str, ...], *, budget: int = SCAN_BUDGET) -> dict[str, Any]:
    """The values of the keys ``names`` in the msgpack map ``frame``, as far as a bounded scan finds
    them: a key that is missing, lies past the bounds, or whose value does not decode is left out."""
    fields: dict[str, Any] = {}
    skipper = _Skipper(frame, budget)
    try:
        head = frame[0]
        if 0x80 <= head <= 0x8F:
            pos, pairs = 1, head & 0x0F
        elif head in _MP_MAPS:
            width = _MP_MAPS[head]
            pos, pairs = 1 + width, int.from_bytes(frame[1 : 1 + width], "big")
        else:
            return fields
        for _ in range(min(pairs, MAX_PAIRS)):
            end = skipper.skip(pos)
            key = msgspec.msgpack.decode(frame[pos:end])
            pos, end = end, skipper.skip(end)
            if isinstance(key, str) and key in names and key not in fields:
                fields[key] = msgspec.msgpack.decode(frame[pos:end])
            pos = end
            if len(fields) == len(names):
                break
    except (IndexError, ValueError, RecursionError, _OverBudget):  # msgspec's DecodeError is a ValueError
        pass
    return fields
