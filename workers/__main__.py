"""``python -m workers NAME``: a worker process, started by the supervisor (the name is for ``ps``)."""

import sys

from workers.worker import main

sys.exit(main())
