"""Settings for the whole suite."""

from __future__ import annotations

from hypothesis import settings

# No per-example deadline: the suite must pass on a busy machine (two copies of it at once), where
# one example of a property may take longer than 200 ms for reasons that are not the code's.
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")
