"""Who may kill which process, and how: SIGTERM, then SIGKILL if it is still alive after a grace
period. No Textual here, so the policy and the sequence are tested without an app, with a fake
signal function."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from gputop.model import Missing, ProcessSample

SignalFn = Callable[[int, int], None]
GRACE_SECONDS = 5.0


def _current_user() -> tuple[int, str]:
    geteuid = getattr(os, "geteuid", None)
    euid = geteuid() if geteuid else -1
    try:
        import pwd

        return euid, pwd.getpwuid(euid).pw_name
    except (ImportError, KeyError):
        return euid, os.environ.get("USER", "")


@dataclass(frozen=True)
class KillPolicy:
    """The user may signal their own processes; root may signal any process it can see."""

    euid: int
    username: str
    readonly: bool = False

    @classmethod
    def for_current_user(cls, *, readonly: bool = False) -> KillPolicy:
        euid, name = _current_user()
        return cls(euid, name, readonly)

    def refusal(self, proc: ProcessSample) -> str | None:
        """Why `proc` may not be killed, or None when it may."""
        if self.readonly:
            return "read-only mode: killing processes is disabled"
        host_facts = (proc.user, proc.name, proc.cmdline, proc.create_time)
        if any(isinstance(v, Missing) and v.reason == "not_visible" for v in host_facts):
            return (f"PID {proc.pid} lives in another PID namespace (a container); "
                    "gputop cannot tell which host process it is")
        if self.euid == 0:
            return None
        if isinstance(proc.user, Missing):
            return f"the owner of PID {proc.pid} is unknown ({proc.user.label()})"
        if proc.user != self.username:
            return f"PID {proc.pid} belongs to {proc.user}; you can signal only your own processes"
        return None


def _default_alive(pid: int) -> bool:
    try:
        import psutil

        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except Exception:  # NoSuchProcess, AccessDenied on exit, psutil missing
        return False


def _default_started(pid: int) -> float | None:
    try:
        import psutil

        return float(psutil.Process(pid).create_time())
    except Exception:
        return None


@dataclass
class Terminator:
    """Sends SIGTERM, waits up to `grace` seconds, then SIGKILL. Before each signal it checks that
    the PID still names the process that was confirmed (same start time), so a PID reused by a
    new process in the meantime is never hit."""

    signal_fn: SignalFn = os.kill
    alive: Callable[[int], bool] = _default_alive
    started: Callable[[int], float | None] = _default_started
    grace: float = GRACE_SECONDS
    poll: float = 0.1
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep

    def _same_process(self, proc: ProcessSample) -> bool:
        if isinstance(proc.create_time, Missing):
            return True
        now = self.started(proc.pid)
        return now is None or abs(now - proc.create_time) < 1.0

    async def terminate(self, proc: ProcessSample,
                        report: Callable[[str], None] = lambda _msg: None) -> str:
        """Returns "gone" (already exited), "reused", "denied", "exited" or "killed"."""
        pid = proc.pid
        if not self.alive(pid):
            return "gone"
        if not self._same_process(proc):
            return "reused"
        try:
            self.signal_fn(pid, signal.SIGTERM)
        except ProcessLookupError:
            return "gone"
        except PermissionError:
            return "denied"
        report(f"sent SIGTERM to PID {pid}")
        waited = 0.0
        while waited < self.grace:
            await self.sleep(self.poll)
            waited += self.poll
            if not self.alive(pid):
                return "exited"
        if not self._same_process(proc):
            return "exited"
        try:
            self.signal_fn(pid, signal.SIGKILL)
        except ProcessLookupError:
            return "exited"
        except PermissionError:
            return "denied"
        return "killed"
