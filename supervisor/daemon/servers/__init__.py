"""What runs each configured server: the crew of servers, a keeper per worker process, pools, replicas
and per-client sessions, heartbeats, restarts, spawning from the zygote, reaping, and a worker's stderr.
"""
