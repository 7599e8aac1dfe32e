"""``DeviceOffload``: one dedicated thread per accelerator, so CUDA state stays on it."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from ..errors import OffloadError
from .thread import ThreadOffload

__all__ = ["DeviceOffload"]


def _cuda_device_count() -> tuple[int | None, str]:
    """How many CUDA devices this process can use (``None``: some, count unknown), and why."""
    try:
        import torch  # only a CUDA device needs it
    except ImportError:
        pass
    else:
        count = int(torch.cuda.device_count())
        return count, f"torch {torch.__version__} sees {count} CUDA device(s)"
    try:
        import onnxruntime
    except ImportError:
        return 0, "neither torch nor onnxruntime is installed"
    if "CUDAExecutionProvider" in onnxruntime.get_available_providers():
        return None, "onnxruntime has the CUDA execution provider"
    return 0, "onnxruntime has no CUDA execution provider"


def _check_device(device: str) -> str:
    """Normalize ``device`` and make sure this machine has it."""
    kind, sep, index = device.strip().lower().partition(":")
    if kind == "cpu" and not sep:
        return "cpu"
    if kind != "cuda":
        raise ValueError(f"unknown device {device!r}: use 'cpu', 'cuda' or 'cuda:N'")
    if sep and not index.isdigit():
        raise ValueError(f"bad CUDA device {device!r}: the index must be a number ('cuda:0')")
    number = int(index or 0)
    count, why = _cuda_device_count()
    if count is not None and number >= count:
        raise OffloadError(
            f"DeviceOffload({device!r}): this machine has no CUDA device {number} ({why}); "
            "use DeviceOffload('cpu') or ThreadOffload on a CPU-only machine"
        )
    return f"cuda:{number}"


def _bind_device(
    device: str, initializer: Callable[..., object] | None, initargs: tuple[Any, ...]
) -> None:
    """Runs first on a device's thread: make it the thread's current CUDA device."""
    if device.startswith("cuda") and "torch" in sys.modules:
        import torch

        torch.cuda.set_device(int(device.partition(":")[2] or 0))
    if initializer is not None:
        initializer(*initargs)


class DeviceOffload(ThreadOffload):
    """Runs every call for one accelerator on one dedicated thread.

    CUDA keeps per-thread state (the current device, the default stream,
    captured graphs); one thread per device keeps it in one place and
    serializes kernels the device would serialize anyway. Give each device
    one ``DeviceOffload`` and share it between the functions that use it.
    ``"cpu"`` is accepted, for machines without an accelerator and for tests.

    Args:
        device: ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.
        initializer: called once on the device's thread (load the model there).
        initargs: arguments for ``initializer``.

    Raises:
        ValueError: ``device`` is not a device name.
        OffloadError: this machine has no such CUDA device.
    """

    def __init__(
        self,
        device: str = "cpu",
        *,
        initializer: Callable[..., object] | None = None,
        initargs: tuple[Any, ...] = (),
    ) -> None:
        self.device = _check_device(device)
        super().__init__(
            1,
            initializer=_bind_device,
            initargs=(self.device, initializer, initargs),
            thread_name_prefix=f"asyncache-{self.device}",
        )

    def __repr__(self) -> str:
        return f"DeviceOffload({self.device!r})"
