"""The Poller's first poll: the reading a one-shot took at its start, and the GPUs' part handed
on before the host is read."""

from __future__ import annotations

import time
from collections.abc import Sequence

from gputop.model import PENDING, HostSample, ProcessSample, Snapshot
from gputop.sources.cpu_start import CpuStart
from gputop.sources.nvml import NvmlSource
from gputop.sources.poller import HOST_RATE_S, Poller
from gputop.testing.fake_nvml import FakeNvml
from gputop.testing.synthetic import node


class Host:
    """A host source that says what it was asked, and names every process it enriches."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def sample(self, now: float) -> HostSample:
        self.calls.append("sample")
        return HostSample(hostname="node")

    def enrich(self, processes: Sequence[ProcessSample], now: float) -> list[ProcessSample]:
        self.calls.append("enrich")
        return [ProcessSample(pid=p.pid, device_index=p.device_index, user="alice")
                for p in processes]

    def start_from(self, reading: CpuStart) -> None:
        self.calls.append("start_from")


def test_a_reading_taken_at_start_is_the_hosts_first_and_sets_when_rates_are_ready() -> None:
    host = Host()
    earlier = CpuStart(time=time.time() - 0.15, stat=b"", processes={})
    with FakeNvml([node(2)]):
        poller = Poller([NvmlSource()], host)  # type: ignore[arg-type]
        poller.open()
        try:
            ready = poller.prime(earlier)
        finally:
            poller.close()

    assert host.calls == ["start_from"]  # not read again: its window began at the reading
    assert ready >= earlier.time + HOST_RATE_S


def test_without_a_reading_prime_reads_the_host() -> None:
    host = Host()
    with FakeNvml([node(2)]):
        poller = Poller([NvmlSource()], host)  # type: ignore[arg-type]
        poller.open()
        try:
            before = time.time()
            ready = poller.prime()
        finally:
            poller.close()

    assert host.calls == ["sample", "enrich"]
    assert ready >= before + HOST_RATE_S


def test_the_gpus_part_of_a_poll_comes_first_with_the_host_fields_pending() -> None:
    host = Host()
    seen: list[tuple[Snapshot, list[str]]] = []

    def on_gpus(snap: Snapshot) -> None:
        seen.append((snap, list(host.calls)))

    with FakeNvml([node(2)]):
        poller = Poller([NvmlSource(background=True)], host)  # type: ignore[arg-type]
        poller.open()
        try:
            whole = poller.poll_ahead(on_gpus)
        finally:
            poller.close()

    ((gpus, asked),) = seen
    assert asked == []  # handed on before the host was read
    assert [d.index for d in gpus.devices] == [d.index for d in whole.devices] == [0, 1]
    assert [p.pid for p in gpus.processes] == [p.pid for p in whole.processes]
    assert {p.user for p in gpus.processes} == {PENDING}
    assert {p.user for p in whole.processes} == {"alice"}
    assert whole.host.hostname == "node"
    assert gpus.time == whole.time


def test_a_poll_without_a_listener_is_one_snapshot() -> None:
    host = Host()
    with FakeNvml([node(1)]):
        poller = Poller([NvmlSource()], host)  # type: ignore[arg-type]
        poller.open()
        try:
            snap = poller.poll_once()
        finally:
            poller.close()

    assert host.calls == ["sample", "enrich"]
    assert [p.user for p in snap.processes] == ["alice"]
