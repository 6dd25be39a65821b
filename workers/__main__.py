"""``python -m workers NAME``: a worker process, started by the supervisor (the name is for ``ps``).

``python -m workers --zygote [remote]``: the pre-imported process the supervisor forks stdio (remote)
workers from (``workers.zygote``). Both argvs are ``supervisor.shared.boot``'s (``worker_argv``,
``zygote_argv``).
"""

import os
import sys

from supervisor.shared.boot import ZYGOTE_FLAG

if sys.argv[1:2] == [ZYGOTE_FLAG] and sys.argv[2:] in ([], ["remote"]):
    from workers import zygote

    sys.exit(zygote.main(*sys.argv[2:]))
else:
    from workers.worker import main

    code = main()
    # The session and the server are closed by now. Skip the interpreter's own shutdown (a fraction
    # of a second of CPU, which adds up when many workers stop at once), as a forked worker does.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
