"""``python -m workers NAME``: a worker process, started by the supervisor (the name is for ``ps``).

``python -m workers --zygote``: the pre-imported process the supervisor forks workers from
(``workers.zygote``).
"""

import sys

if sys.argv[1:] == ["--zygote"]:
    from workers.zygote import main
else:
    from workers.worker import main

sys.exit(main())
