"""The zygote's allocator pools (``workers.pools``): their free blocks are read and taken."""

from __future__ import annotations

import json
import subprocess
import sys

from workers import pools


def test_the_free_blocks_of_every_size_class_are_read() -> None:
    assert sorted(pools.free_blocks()) == list(range(pools.SIZE_CLASSES))


def test_filling_takes_the_free_blocks_of_the_larger_classes() -> None:
    # In a fresh interpreter: the statistics are read again after filling; reading them leaves a
    # few holes of its own in the small classes, none in the larger ones.
    script = (
        "from workers import pools; import json; taken = pools.fill(); "
        "print(json.dumps([taken, pools.free_blocks()]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    taken, left = json.loads(out.stdout)
    assert taken > 0
    assert all(free == 0 for size_class, free in left.items() if int(size_class) >= 16), left
