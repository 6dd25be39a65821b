"""The layering contracts of ``pyproject.toml`` (``[tool.importlinter]``) hold: ``lint-imports``."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_import_contract_is_kept() -> None:
    lint_imports = Path(sys.executable).parent / "lint-imports"
    command = str(lint_imports) if lint_imports.exists() else shutil.which("lint-imports")
    assert command is not None, "lint-imports is not installed (the test extra's import-linter)"
    run = subprocess.run(
        [command, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert run.returncode == 0, run.stdout[-5000:] + run.stderr[-2000:]
    assert "0 broken" in run.stdout
