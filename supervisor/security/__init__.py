"""Keys and tokens: CurveZMQ key files and the gate on the supervisor's sockets, and OAuth tokens kept
for remote servers.
"""
