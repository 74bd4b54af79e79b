"""The live feed: a Poller over every GPU backend this machine may have (NVML, and amdsmi where
it is installed), and the host."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gputop.errors import BackendUnavailable
from gputop.sources.base import GpuSource
from gputop.sources.poller import Poller

if TYPE_CHECKING:
    from gputop.model import HostSample, ProcessSample
    from gputop.sources.host import HostSource


def live_poller(devices: set[int] | None = None, *, slow_interval: float = 5.0,
                background: bool = False, brief: bool = False) -> Poller:
    """A Poller over every GPU backend this machine may have, and the host. With `background`,
    a poll does not wait for the slow NVML calls (the dashboard); `brief`, NVIDIA GPUs are read
    for what a one-shot's table shows (NvmlSource)."""
    from gputop.sources.nvml import NvmlSource

    sources: list[GpuSource] = [NvmlSource(slow_interval=slow_interval, background=background,
                                           brief=brief)]
    try:
        from gputop.sources.amd import AmdSource
    except ImportError:
        pass
    else:
        sources.append(AmdSource(slow_interval=slow_interval))
    poller = Poller(sources, HostLater(), devices=devices)
    try:
        poller.open()
    except BackendUnavailable as e:
        raise no_gpu_error(e, poller.failures) from None
    return poller


def no_gpu_error(top: BackendUnavailable,
                 failures: Sequence[BackendUnavailable]) -> BackendUnavailable:
    """What to say when no GPU source opens. A driver fault (`priority` > 0) is said as it is.
    Where nothing was found at all: the NVIDIA reason, the AMD one where an AMD GPU is there or
    amdsmi is installed (its user has AMD GPUs in mind), and that `--demo` runs without a GPU."""
    if top.priority > 0:
        return top
    parts = [str(top)]
    for f in failures:
        if f is top or "AMD" not in f.message:
            continue
        if f.message != "no AMD GPU found":
            parts.append(str(f))  # an AMD GPU is there, and this is why it cannot be read
        elif importlib.util.find_spec("amdsmi") is not None:
            parts.append("amdsmi is installed but finds no AMD GPU: load ROCm's amdgpu driver "
                         "(sudo modprobe amdgpu), or give the container /dev/kfd and /dev/dri")
    parts.append("to see gputop without a GPU: gputop --demo")
    return BackendUnavailable("; ".join(parts))


class HostLater:
    """The host's source (sources.host.HostSource), loaded when first asked: psutil and the /proc
    readers are not needed before the GPUs' part of the first poll, which the dashboard draws
    at once (Poller.poll_once's `on_gpus`)."""

    def __init__(self) -> None:
        self._host: HostSource | None = None

    @property
    def source(self) -> HostSource:
        if self._host is None:
            from gputop.sources.host import HostSource

            self._host = HostSource()
        return self._host

    def sample(self, now: float) -> HostSample:
        return self.source.sample(now)

    def enrich(self, processes: Sequence[ProcessSample], now: float) -> list[ProcessSample]:
        return self.source.enrich(processes, now)

    def close(self) -> None:
        if self._host is not None:
            self._host.close()

    def __getattr__(self, name: str) -> Any:  # probe_notes, start_from
        if name.startswith("__"):  # copy, pickle: not the source's
            raise AttributeError(name)
        return getattr(self.source, name)
