"""gputop's own errors. Vendor errors (pynvml, amdsmi, psutil) are translated into these at the
edge of each source, once, so nothing above the sources knows a vendor's exception classes."""

from __future__ import annotations


class GputopError(Exception):
    """An error with a one-line message meant for the user (no traceback is shown)."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message}: {self.hint}" if self.hint else self.message


class BackendUnavailable(GputopError):
    """A vendor library cannot be used at all on this machine (no library, no driver, no GPU).

    `priority` orders reasons when every backend fails: "the NVIDIA driver is not loaded" (1) says
    more than "no AMD library on this machine" (0)."""

    def __init__(self, message: str, *, hint: str = "", priority: int = 0) -> None:
        super().__init__(message, hint=hint)
        self.priority = priority


class DriverMismatch(BackendUnavailable):
    """The user-space library and the loaded kernel driver are of different versions."""


class RecordingError(GputopError):
    """A recording cannot be read or written."""


# Per-call errors: a source catches these and turns them into a Missing reason for one field.


class CallError(Exception):
    """One vendor call failed; `reason` is the Missing reason the field gets."""

    reason = "error"


class Unsupported(CallError):
    reason = "unsupported"


class NoPermission(CallError):
    reason = "no_permission"


class GpuLost(CallError):
    reason = "gpu_lost"


class Transient(CallError):
    """Worth asking again next tick (busy, timeout, retry)."""

    reason = "error"
