"""Where a sync prediction runs on a miss: thread, process and device pools.

- ``ThreadOffload`` for work that releases the GIL (onnxruntime, torch, numpy);
- ``ProcessOffload`` for GIL-bound Python: the model loads once per worker
  process through ``initializer``; a worker that dies fails only the call it
  was running, with ``WorkerDiedError``, and is replaced;
- ``DeviceOffload`` runs everything for one accelerator on one dedicated
  thread, so CUDA state (current device, streams, graphs) stays on that thread.

Every pool is an ``Offload``: ``await pool.run(fn, *args, **kwargs)`` and
``await pool.aclose()``. The event loop never blocks on a pool: waiting for
workers, results and shutdown happens on threads the pool owns.

One module per way of running work: ``base`` (the protocol and what the pools
share), ``thread``, ``device``, ``process`` (the parent's side of a process
pool), ``supervisor`` (the thread that owns one worker process), ``worker``
(what runs inside a worker process) and ``shared`` (``offload="thread"`` or
``"process"``).
"""

from __future__ import annotations

from .base import Offload
from .device import DeviceOffload
from .process import ProcessOffload
from .shared import aclose_default_offloads, resolve_offload
from .thread import ThreadOffload

__all__ = [
    "DeviceOffload",
    "Offload",
    "ProcessOffload",
    "ThreadOffload",
    "aclose_default_offloads",
    "resolve_offload",
]
