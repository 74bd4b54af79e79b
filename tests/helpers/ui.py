"""Builders for the dashboard's tests: small synthetic Snapshots of one precise situation each
(an 8- or 16-GPU H100 node running one Slurm job, a notebook in a container, a hot GPU, a
downtrained link, a lost GPU, ranks the probe sees), frozen clocks, and an app driven through
Pilot."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from textual.app import App
from textual.geometry import Region

from gputop.model import (
    ChildProcess,
    HostSample,
    JobInfo,
    LinkSample,
    Missing,
    ProbeStats,
    ProcessSample,
    Snapshot,
    SystemInfo,
    Topology,
)
from gputop.testing.synthetic import GIB, h100
from gputop.ui import textual_private
from gputop.ui.app import GputopApp
from gputop.ui.widgets.process_table import ProcessTable

T0 = 1_800_000_000.0  # every synthetic snapshot is taken at T0 + tick

# ---------------------------------------------------------------------------------------------
# Synthetic node: 8 (or 16) H100s running one Slurm job, a notebook in a container, and a few
# situations worth seeing (hot GPU, downtrained link, lost GPU) when asked for.


def process(pid: int, gpu: int, *, user: Any = "mlteam", cmdline: Any = None, name: Any = "python3",
            cpu: Any = 101.0, gpu_mem: Any = 60 * GIB, sm: Any = 80.0, workers: int = 0,
            job: JobInfo | None = None, started: Any = T0 - 3600.0) -> ProcessSample:
    if cmdline is None:
        cmdline = ("/usr/bin/python3", "train.py", "--config", "llama-8b.yaml",
                   f"--local_rank={gpu}")
    children = tuple(ChildProcess(pid=pid * 10 + k, name="pt_data_worker",
                                  cpu_percent=90.0 + k, rss=2 * GIB) for k in range(workers))
    return ProcessSample(pid=pid, device_index=gpu, gpu_mem=gpu_mem, sm_util=sm, mem_util=20.0,
                         user=user, name=name, cmdline=cmdline, cpu_percent=cpu,
                         rss=20 * GIB, create_time=started,
                         job=job if job is not None else JobInfo(slurm_job_id="48213"),
                         children=children)


def node(tick: int = 0, n_gpus: int = 8, *, util: Callable[[int, int], float] | None = None,
         devices: dict[int, dict[str, Any]] | None = None,
         processes: tuple[ProcessSample, ...] | None = None, warnings: tuple[str, ...] = (),
         links: bool = True) -> Snapshot:
    """One tick of the synthetic node; `util(gpu, tick)` shapes utilization over time."""
    over = devices or {}
    devs = []
    for i in range(n_gpus):
        u = util(i, tick) if util else 97.0 + (i + tick) % 3
        f: dict[str, Any] = {"util_gpu": u, "mem_used": (60 + i) * GIB,
                             "power_draw": 640.0 + 7 * i, "temp_gpu": 55.0 + i,
                             "temp_margin": 32.0 - i}
        devs.append(dataclasses.replace(h100(i, **f), **over.get(i, {})))
    if processes is None:
        procs = [process(2210431 + i, i, workers=6 if i < 2 else 0, gpu_mem=(60 + i) * GIB)
                 for i in range(n_gpus)]
        procs.append(process(1187334, n_gpus - 1, user="alice", name="python",
                             cmdline=("python", "-m", "ipykernel_launcher", "-f", "k.json"),
                             cpu=0.0, gpu_mem=3 * GIB, sm=0.0, started=T0 - 12600.0,
                             job=JobInfo(container_id="9f73bff18fd479e6b7ca",
                                         container_runtime="docker")))
        processes = tuple(procs)
    lks = tuple(
        LinkSample(device_index=i, link=k, kind="nvlink", up=True, version="4.0",
                   remote_bus_id=f"00000000:{5 + k // 5:02X}:00.0", remote_kind="switch",
                   speed=26.5e9, rx=1.3e9, tx=1.3e9,
                   errors={"crc_flit": 0, "crc_data": 0, "replay": 3 if (i, k) == (6, 11) else 0,
                           "recovery": 0})
        for i in range(n_gpus) for k in range(18)) if links else ()
    matrix = tuple(tuple("X" if a == b else "NV18" for b in range(n_gpus)) for a in range(n_gpus))
    topo = Topology(matrix=matrix,
                    cpu_affinity=tuple("0-51" if i < n_gpus // 2 else "52-103"
                                       for i in range(n_gpus)),
                    numa_affinity=tuple("0" if i < n_gpus // 2 else "1" for i in range(n_gpus)))
    system = SystemInfo(hostname="dgx-h100-07", backends=("nvml",), driver_version="580.159.04",
                        cuda_version="13.0", rocm_version=Missing("unsupported"),
                        gputop_version="0.1.0")
    host = HostSample(hostname="dgx-h100-07", cpu_count=104, cpu_percent=37.0,
                      load_avg=(31.9, 12.1, 5.0), mem_total=2015 * GIB, mem_used=233 * GIB)
    return Snapshot(time=T0 + tick, system=system, host=host, devices=tuple(devs),
                    processes=processes, links=lks, topology=topo, warnings=warnings)


def sawtooth(gpu: int, tick: int) -> float:
    return 95.0 if (tick + gpu) % 4 else 20.0


def series(n_ticks: int = 30, **kw: Any) -> list[Snapshot]:
    return [node(t, **kw) for t in range(n_ticks)]


def troubled(tick: int = 29, n_gpus: int = 8, **kw: Any) -> Snapshot:
    """GPU 3 at its thermal limit, GPU 5 lost, GPU 6 on a downtrained link, GPU 2 waiting for a
    row remap: each shows a word, not only a colour."""
    devices = {
        3: {"temp_gpu": 86.0, "temp_margin": 1.0, "throttle": ("sw_thermal", "sw_power_cap"),
            "clock_sm": 1050},
        5: {"lost": Missing("gpu_lost", since=T0 + 20), "util_gpu": Missing("gpu_lost"),
            "mem_used": Missing("gpu_lost"), "power_draw": Missing("gpu_lost"),
            "temp_gpu": Missing("gpu_lost")},
        6: {"pcie_gen": 4, "pcie_width": 8},
        2: {"remap_pending": True},
    }
    return node(tick, n_gpus, devices=devices,
                warnings=("GPU 5 fell off the bus (Xid 79)",), **kw)


def frozen(t: float = T0 + 29.4) -> Callable[[], float]:
    return lambda: t


class Clock:
    """A clock the test moves by hand (or that follows the snapshots shown, `follow`)."""

    def __init__(self, t: float, follow: bool = True) -> None:
        self.t = t
        self.follow = follow

    def __call__(self) -> float:
        return self.t


def make_app(*, clock: Callable[[], float] | None = None, **kw: Any) -> GputopApp:
    """An app with no feed: the test applies snapshots. Unless given a clock, the app's clock
    reads 0.4 s after the latest snapshot shown, so the data is live."""
    kw.setdefault("table_interval", 0.0)  # every applied snapshot refreshes the table
    return GputopApp(None, clock=clock or Clock(T0), **kw)


async def show(app: GputopApp, pilot: Any, snaps: list[Snapshot]) -> None:
    for snap in snaps:
        if isinstance(app.clock, Clock) and app.clock.follow:
            app.clock.t = snap.time + 0.4
        app.apply_snapshot(snap)
    await pilot.pause()


def screen_text(app: App[Any]) -> str:
    """Everything on screen as plain text."""
    return "\n".join(strip.text for strip in app.screen._compositor.render_strips())


def footer_text(app: App[Any]) -> str:
    return screen_text(app).splitlines()[-1]


def table(app: GputopApp) -> ProcessTable:
    return app.dashboard.table


def pids(app: GputopApp) -> list[str]:
    return [r.key for r in table(app).rows]


def with_probe(p: ProcessSample, time: float, share: float = 0.75) -> ProcessSample:
    """A training process whose probe says PyTorch reserved all but 2 GiB of NVML's figure
    and allocated `share` of it."""
    reserved = p.gpu_mem - 2 * GIB
    stats = ProbeStats(ts=time - 0.3, device=p.device_index, allocated=int(reserved * share),
                       reserved=reserved, steps=1000, step_time_s=0.8, wait_frac=0.01)
    return dataclasses.replace(p, probe=stats)


def probed_node(tick: int = 0, share: float = 0.75) -> Snapshot:
    """The synthetic 8-GPU node with every training rank probed; the notebook on GPU 7 is not."""
    s = node(tick)
    procs = tuple(with_probe(p, s.time, share) if p.user == "mlteam" else p
                  for p in s.processes)
    devices = tuple(dataclasses.replace(d, mem_used=sum(p.gpu_mem for p in procs
                                                         if p.device_index == d.index))
                    for d in s.devices)
    return dataclasses.replace(s, devices=devices, processes=procs)


@contextmanager
def repainted(widget: Any) -> Iterator[list[Region]]:
    """The regions of `widget`'s content it asks to have repainted while in the block, however
    it asks: its `refresh`, or `textual_private.repaint_now` (which hands a drawn-through-its-
    frame widget's regions to the screen without it)."""
    regions: list[Region] = []
    refresh, mark = widget.refresh, textual_private._mark

    def spy(*asked: Region, **kw: Any) -> Any:
        regions.extend(asked)
        return refresh(*asked, **kw)

    def spy_mark(w: Any, asked: tuple[Region, ...]) -> None:
        if w is widget:
            regions.extend(asked)
        mark(w, asked)

    widget.refresh = spy
    textual_private._mark = spy_mark
    try:
        yield regions
    finally:
        del widget.refresh
        textual_private._mark = mark
