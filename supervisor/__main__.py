"""``python -m supervisor``: the same as the ``mcp-supervisor`` command."""

import sys

from supervisor.cli.main import main

sys.exit(main())
