"""``asyncache demo``: a MiniLM decision service behind asyncache, under load.

``service`` is the ASGI app (uvicorn runs it in a child process), ``workload``
is the client that drives it, and ``run`` ties them together and prints the
table.
"""

from .run import main

__all__ = ["main"]
