"""Fill the free blocks of the zygote's partly used allocator pools, so a worker's objects land elsewhere.

CPython's small-object allocator (obmalloc) serves a new object of up to 512 bytes from a pool of its
size class that still has a free block, before any empty pool. After the zygote's imports, many
pools in its pages have a few free blocks among the objects every worker shares (a module's
temporaries, freed once it was imported). A forked worker's first allocations would fill those
holes, and each one copies a whole page of the zygote's objects for one small object of its own.
Taking the free blocks once, in the zygote, before it forks (``fill``), sends a worker's allocations
to pages of its own instead (measured: about 0.15 MB less a worker, at the cost of a few hundred kB
of filler in the zygote, which every worker shares).

The free blocks of each size class are read from the allocator's own statistics
(``sys._debugmallocstats``, written to the C ``stderr``); blocks of a class are taken with objects
of that size that hold nothing else (``object()``, an ``int``, a ``bytes`` of the right length).
Where the statistics cannot be read (another interpreter, another format), nothing is filled.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Callable
from typing import Final

__all__ = ["fill", "free_blocks"]

SIZE_CLASSES: Final = 32  # of 16 bytes each, up to 512 (CPython 3.11's obmalloc)
BYTES_HEADER: Final = 33  # what a bytes object of length 0 asks the allocator for
ROUNDS: Final = 3  # the filler's own allocations may open holes too: fill again, at most this often
_ROW = re.compile(rb"^\s*(\d+)\s+(\d+)\s+\d+\s+\d+\s+(\d+)\s*$", re.MULTILINE)

_filler: list[list[object]] = []  # kept for the zygote's life, and so every worker's


def free_blocks() -> dict[int, int]:
    """Free blocks in partly used pools, by size class (0: 16 bytes, ..., 31: 512); empty where the
    allocator's statistics cannot be read."""
    debug = getattr(sys, "_debugmallocstats", None)
    if debug is None:
        return {}
    try:
        text = _written_to_stderr(debug)
    except OSError:  # no temporary file, or no descriptor 2 to borrow: fill nothing
        return {}
    found: dict[int, int] = {}
    for match in _ROW.finditer(text):
        size_class, size, free = (int(group) for group in match.groups())
        if size_class < SIZE_CLASSES and size == 16 * (size_class + 1):
            found[size_class] = free
    return found


def _written_to_stderr(write: Callable[[], object]) -> bytes:
    """What ``write`` writes to the C ``stderr`` (descriptor 2, borrowed and given back)."""
    with tempfile.TemporaryFile() as out:
        sys.stderr.flush()
        saved = os.dup(2)
        try:
            os.dup2(out.fileno(), 2)
            write()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        out.seek(0)
        return out.read()


def _block(size_class: int, n: int) -> object:
    """A new object the allocator serves from a block of ``size_class``."""
    if size_class == 0:
        return object()  # 16 bytes
    if size_class == 1:
        return (1 << 20) + n  # an int of one digit: 28 bytes, not a cached small int
    return bytes(16 * (size_class + 1) - BYTES_HEADER)  # never a shared empty or 1-byte bytes here


def fill() -> int:
    """Take every free block of the partly used pools; the number of blocks taken."""
    taken = 0
    for _ in range(ROUNDS):
        free = {size_class: n for size_class, n in free_blocks().items() if n > 0}
        if not free:
            break
        held: list[object] = [None] * sum(free.values())  # sized first: no growth while filling
        i = 0
        for size_class, n in free.items():
            for k in range(n):
                held[i] = _block(size_class, k)
                i += 1
        _filler.append(held)
        taken += i
    return taken
