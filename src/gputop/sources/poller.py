"""Puts the sources together: one Snapshot per tick, vendor calls kept off the event loop."""

from __future__ import annotations

import dataclasses
import math
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Protocol

from gputop import __version__
from gputop.errors import BackendUnavailable
from gputop.model import HostSample, Missing, ProcessSample, Snapshot, SystemInfo
from gputop.safetext import encodable
from gputop.sources.base import GpuSource, GpuTick, SourceInfo
from gputop.sources.cpu_start import CpuStart

# CPU times count in clock ticks (10 ms): over this long one tick is 5 % of a core.
HOST_RATE_S = 0.2


class HostSourceLike(Protocol):
    def sample(self, now: float) -> HostSample: ...

    def enrich(self, processes: Sequence[ProcessSample], now: float) -> list[ProcessSample]: ...


class Poller:
    """Polls every open GPU source and the host; `poll_once` blocks, `stream` is async."""

    def __init__(self, sources: Sequence[GpuSource], host: HostSourceLike | None = None, *,
                 devices: set[int] | None = None, clock: Callable[[], float] = time.time) -> None:
        self._candidates = list(sources)
        self._host = host
        self._only = devices
        self._clock = clock
        self.sources: list[GpuSource] = []
        self.infos: list[SourceInfo] = []
        self.open_warnings: list[str] = []
        self.failures: list[BackendUnavailable] = []  # why each source that did not open
        self._offsets: list[int] = []
        self._system = SystemInfo()
        self._ahead: Snapshot | None = None

    def open(self) -> None:
        """Opens every source that can be opened. Raises BackendUnavailable, with the most useful
        reason, only when none can."""
        failures = self.failures = []
        for src in self._candidates:
            try:
                info = src.open()
            except BackendUnavailable as e:
                failures.append(e)
                continue
            self.sources.append(src)
            self.infos.append(info)
        if not self.sources:
            if failures:
                # A driver/library problem says more than "no AMD library here".
                failures.sort(key=lambda e: getattr(e, "priority", 0), reverse=True)
                raise failures[0]
            raise BackendUnavailable("no GPU backend available")
        self.open_warnings = [str(e) for e in failures if getattr(e, "priority", 0) > 0]
        self._system = self._system_info()

    def _system_info(self) -> SystemInfo:
        def first(attr: str) -> str | Missing:
            for info in self.infos:
                v = getattr(info, attr)
                if v:
                    return str(v)
            return Missing("unsupported")

        return SystemInfo(
            hostname=encodable(socket.gethostname()),
            backends=tuple(i.backend for i in self.infos),
            driver_version=first("driver_version"),
            cuda_version=first("cuda_version"),
            nvml_version=first("nvml_version"),
            rocm_version=first("rocm_version"),
            gputop_version=__version__,
        )

    def prime(self, cpu_start: CpuStart | None = None) -> float:
        """Takes the first reading of every counter whose rate needs two: each source's (see
        NvmlSource.prime) and the host's CPU times, of the node and of each GPU process and its
        workers; or, given `cpu_start` (read earlier, sources.cpu_start), takes that as the
        host's first reading. Returns the clock time from which the next poll has every rate."""
        now = self._clock()
        ready = now
        processes: list[ProcessSample] = []
        for src in self.sources:
            prime = getattr(src, "prime", None)
            if prime is not None:
                ready = max(ready, prime(now))
                processes += getattr(src, "primed_processes", ())
        start_from = getattr(self._host, "start_from", None)
        if cpu_start is not None and start_from is not None:
            start_from(cpu_start)
            ready = max(ready, cpu_start.time + HOST_RATE_S)
        elif self._host is not None:
            self._host.sample(now)
            self._host.enrich(processes, now)
            ready = max(ready, now + HOST_RATE_S)
        return ready

    def poll_once(self, on_gpus: Callable[[Snapshot], None] | None = None) -> Snapshot:
        """One Snapshot now. `on_gpus` is handed its GPUs' part first, before the host is read
        (the host and each process's host fields pending): a first frame need not wait for
        the host."""
        now = self._clock()
        merged = GpuTick()
        offset = 0
        for src in self.sources:
            tick = src.poll(now)
            merged.devices += [_shift(d, "index", offset) for d in tick.devices]
            merged.processes += [_shift(p, "device_index", offset) for p in tick.processes]
            merged.links += [_shift(lk, "device_index", offset) for lk in tick.links]
            merged.warnings += tick.warnings
            if merged.topology is None:
                merged.topology = tick.topology
            offset += len(tick.devices)
        if self._only is not None:
            merged.devices = [d for d in merged.devices if d.index in self._only]
            merged.processes = [p for p in merged.processes if p.device_index in self._only]
            merged.links = [lk for lk in merged.links if lk.device_index in self._only]
        host = HostSample()
        processes = merged.processes
        if self._host is not None:
            if on_gpus is not None:
                on_gpus(self._snapshot(now, merged, host, processes))
            host = self._host.sample(now)
            processes = self._host.enrich(processes, now)
            # Probe files refused this tick (a symlink, another owner, bad JSON): said, not hidden.
            merged.warnings += getattr(self._host, "probe_notes", [])
        return self._snapshot(now, merged, host, processes)

    def _snapshot(self, now: float, merged: GpuTick, host: HostSample,
                  processes: Sequence[ProcessSample]) -> Snapshot:
        return Snapshot(
            time=now,
            system=self._system,
            host=host,
            devices=tuple(merged.devices),
            processes=tuple(processes),
            links=tuple(merged.links),
            topology=merged.topology,
            warnings=tuple(self.open_warnings + merged.warnings),
        )

    def poll_ahead(self, on_gpus: Callable[[Snapshot], None] | None = None) -> Snapshot:
        """Polls now, before anything streams: `stream` yields this snapshot first (the
        dashboard takes it while Textual loads). `on_gpus`: as for `poll_once`."""
        self._ahead = self.poll_once(on_gpus)
        return self._ahead

    async def poll(self) -> Snapshot:
        import asyncio  # not at the top: --once and headless recording never need it

        return await asyncio.to_thread(self.poll_once)

    async def stream(self, interval: float) -> AsyncIterator[Snapshot]:
        """One Snapshot every `interval` seconds, on a clock (see `ticks`)."""
        async for _ in ticks(interval):
            ahead, self._ahead = self._ahead, None
            yield ahead if ahead is not None else await self.poll()

    def close(self) -> None:
        host_close = getattr(self._host, "close", None)  # the files a host source keeps open
        for close in [*(src.close for src in self.sources), host_close]:
            try:
                if close is not None:
                    close()
            except Exception:  # closing must never mask the reason we are closing
                pass
        self.sources.clear()


async def ticks(interval: float, *, clock: Callable[[], float] | None = None,
                sleep: Callable[[float], Awaitable[object]] | None = None,
                ) -> AsyncIterator[float]:
    """Yields at start, start + interval, start + 2 interval, ... (the deadline it is for), so
    the time spent on a tick (a poll, the consumer's work) does not add up into drift. A tick
    that ends past the next deadline skips to the one after: a slow poll stretches the interval
    instead of stacking polls up, and the ticks stay on the clock."""
    import asyncio  # here: --once and headless recording never need it

    now = clock or time.monotonic
    wait = sleep or asyncio.sleep
    deadline = now()
    while True:
        yield deadline
        deadline += interval
        late = now() - deadline
        if late > 0 and interval > 0:
            deadline += math.ceil(late / interval) * interval
        await wait(deadline - now())


def _shift(obj, attr: str, offset: int):  # type: ignore[no-untyped-def]
    return obj if offset == 0 else dataclasses.replace(obj, **{attr: getattr(obj, attr) + offset})
