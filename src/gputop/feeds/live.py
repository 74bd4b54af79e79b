"""The live feed: a Poller over every GPU backend this machine may have (NVML, and amdsmi where
it is installed), and the host."""

from __future__ import annotations

from gputop.sources.base import GpuSource
from gputop.sources.poller import Poller


def live_poller(devices: set[int] | None = None, *, slow_interval: float = 5.0) -> Poller:
    """A Poller over every GPU backend this machine may have, and the host."""
    from gputop.sources.host import HostSource
    from gputop.sources.nvml import NvmlSource

    sources: list[GpuSource] = [NvmlSource(slow_interval=slow_interval)]
    try:
        from gputop.sources.amd import AmdSource
    except ImportError:
        pass
    else:
        sources.append(AmdSource(slow_interval=slow_interval))
    poller = Poller(sources, HostSource(), devices=devices)
    poller.open()
    return poller
