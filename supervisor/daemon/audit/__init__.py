"""The audit trail: one JSON line for every tool call, resource read and prompt get the supervisor answers.

Its modules: ``record`` (what a request's line holds, and how it is encoded), ``files`` (appending
lines to the file and rotating it; reading the files back, filtered: the CLI's ``audit --file`` and
the supervisor's ``GetAudit`` share it), ``identities`` (the bounded table of who called) and
``trail`` (the supervisor's part: the requests open, their lines buffered and written from a worker
thread, the figures). Nothing is imported here, so ``audit --file`` loads neither trio nor the daemon.
"""
