"""Small hand-made Snapshots for tests and benchmarks, with the values of a real H100 (driver 580,
measured; docs/diagnostics.md §0). Prefer recorded fixtures; use these where a test needs one
precise situation."""

from __future__ import annotations

from typing import Any

from gputop.model import (
    DeviceSample,
    HostSample,
    LinkSample,
    Missing,
    ProcessSample,
    Snapshot,
    SystemInfo,
    Topology,
)

H100_TOTAL = 85520809984
H100_RESERVED = 503316480
GIB = 1 << 30


def h100(index: int, **over: Any) -> DeviceSample:
    used = over.pop("mem_used", 10 * GIB)
    f: dict[str, Any] = dict(
        util_gpu=95.0, util_mem=30.0, mem_total=H100_TOTAL, mem_used=used,
        mem_reserved=H100_RESERVED, mem_free=H100_TOTAL - H100_RESERVED - used,
        temp_gpu=55.0, temp_mem=50.0, temp_slowdown=89.0, temp_shutdown=95.0,
        temp_max_operating=87.0, temp_margin=32.0, power_draw=640.0, power_limit=700.0,
        power_default_limit=700.0, energy_j=123456.0, clock_sm=1515, clock_sm_max=1980,
        clock_mem=2619, clock_mem_max=2619, pstate=0, fan=Missing("unsupported"),
        persistence_mode=True, compute_capability="9.0", throttle=("sw_power_cap",),
        throttle_time={"sw_power_cap": 10.0, "sync_boost": 0.0, "sw_thermal": 0.0,
                       "hw_thermal": 0.0, "hw_power_brake": 0.0},
        pcie_gen=5, pcie_gen_max=5, pcie_width=16, pcie_width_max=16, pcie_rx=2.0e9,
        pcie_tx=5.0e8, pcie_replays=0, enc_util=0.0, dec_util=0.0, ecc_enabled=True,
        ecc_corrected=0, ecc_uncorrected=0, remapped_corrected=0, remapped_uncorrected=0,
        remap_pending=False, remap_failed=False, mig_enabled=False, gr_active=96.0,
        sm_active=92.0, sm_occupancy=14.0, tensor_active=85.0, dram_active=23.0,
        numa_node=index // 4, cpu_affinity="0-51" if index < 4 else "52-103",
    )
    f.update(over)
    return DeviceSample(index=index, vendor="nvidia", name="NVIDIA H100 80GB HBM3",
                        uuid=f"GPU-00000000-0000-0000-0000-00000000000{index}",
                        pci_bus_id=f"00000000:{0x18 + 0x10 * index:02X}:00.0", **f)


def nvlinks(index: int, n: int = 18, rate: float = 5.0e9) -> tuple[LinkSample, ...]:
    return tuple(
        LinkSample(device_index=index, link=k, kind="nvlink", up=True, version="4.0",
                   remote_bus_id="00000000:C0:00.0", remote_kind="switch", rx=rate, tx=rate,
                   errors={"replay": 0, "recovery": 0, "crc_flit": 0, "crc_data": 0})
        for k in range(n))


def node(n_gpus: int = 2, *, time: float = 1_800_000_000.0, links: int = 0,
         processes: bool = True, **device_over: Any) -> Snapshot:
    devices = tuple(h100(i, **device_over) for i in range(n_gpus))
    procs = tuple(ProcessSample(pid=1000 + i, device_index=i, gpu_mem=9 * GIB, sm_util=80.0,
                                mem_util=25.0) for i in range(n_gpus)) if processes else ()
    lks = tuple(lk for i in range(n_gpus) for lk in nvlinks(i, links)) if links else ()
    label = f"NV{links}" if links else "SYS"
    matrix = tuple(tuple("X" if a == b else label for b in range(n_gpus)) for a in range(n_gpus))
    topo = Topology(matrix=matrix,
                    cpu_affinity=tuple(str(d.cpu_affinity) for d in devices),
                    numa_affinity=tuple(str(d.numa_node) for d in devices))
    return Snapshot(time=time, system=SystemInfo(hostname="node"), host=HostSample(),
                    devices=devices, processes=procs, links=lks, topology=topo)


def series(n_ticks: int, n_gpus: int = 2, *, start: float = 1_800_000_000.0,
           **over: Any) -> list[Snapshot]:
    """`n_ticks` snapshots 1 s apart with utilization moving, so that ticks differ."""
    return [node(n_gpus, time=start + t, util_gpu=float(50 + (t * 7) % 50), **over)
            for t in range(n_ticks)]
