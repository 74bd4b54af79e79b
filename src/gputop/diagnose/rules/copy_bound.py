"""R3 `gpu.copy_bound` (Hopper and newer): "busy" only because it is copying.

NVML utilization counts copy-engine work as busy: a pure host-to-device copy loop read 94.9 % util
while GPM `gr_active` and `sm_active` read 0 and PCIe RX ran at 52,810 MiB/s (docs/diagnostics.md
§0.1, §8 R3). GPM is what tells the two apart, so older GPUs are not judged.
"""

from __future__ import annotations

from collections.abc import Sequence

from gputop.diagnose.types import Condition, Diagnostic
from gputop.diagnose.window import covers, devices, field_mean, last
from gputop.model import Snapshot

SMOOTH_S = 10.0  # NVML util moves every ~200 ms; a 10 s mean keeps one dip from resetting `for`
# R3 says a minute. A real H100 copying 29 GB/s each way read 100 % util and 0.1 % gract from
# its first GPM sample on (fixtures/nvidia/h100-train/copy_bound), so 20 s of the 10 s means
# names it half a minute in, as fast as the other loop rules; it stays info until ESCALATE_S.
FOR_S = 20.0
CLEAR_S = 5.0  # the 10 s means already hold it past the copies' end
ESCALATE_S = 300.0  # R3: warning if it persists 5 min
UTIL_BUSY = 80.0  # R3: NVML util >= 80 % ...
GR_IDLE = 20.0  # ... and GPM gract < 20 % ...
PCIE_BYTES = 5 * (1 << 30)  # ... and PCIe RX + TX > 5 GiB/s

FIX = ("Use pinned memory with non_blocking=True, prefetch to the GPU on a side stream, keep data "
       "resident on the GPU, and avoid a per-step .to('cuda') of large tensors.")


def _means(window: Sequence[Snapshot], index: int) -> tuple[float, float, float, float] | None:
    util = field_mean(window, index, "util_gpu")
    gr = field_mean(window, index, "gr_active")
    if util is None or gr is None:  # no GPM: nothing tells copies from kernels
        return None
    rx = field_mean(window, index, "pcie_rx")
    if rx is None:
        return None
    return util, gr, rx, field_mean(window, index, "pcie_tx") or 0.0


def _copying(m: tuple[float, float, float, float] | None) -> bool:
    return m is not None and m[0] >= UTIL_BUSY and m[1] < GR_IDLE and m[2] + m[3] > PCIE_BYTES


def check(window: Sequence[Snapshot]) -> list[Condition]:
    recent = last(window, SMOOTH_S)
    out = []
    for index in devices(recent):
        m = _means(recent, index)
        if m is None or not _copying(m):
            continue
        util, gr, rx, tx = m
        lasting = covers(window, ESCALATE_S, 0.95) and _copying(_means(window, index))
        gpu = f"GPU{index}"
        out.append(Condition(
            id="gpu.copy_bound", severity="warning" if lasting else "info", device=index,
            title=f"{gpu} reports {util:.0f} % util but its engines are {gr:.0f} % busy: it is "
                  f"moving data over PCIe ({rx / 1e9:.0f} GB/s RX, {tx / 1e9:.0f} GB/s TX)",
            cause="NVML utilization counts copies as busy; GPM graphics activity shows that no "
                  "kernels run. The job spends its time on host-device transfers.",
            fix=FIX,
            evidence={"util_pct": util, "gr_active_pct": gr, "pcie_rx_bps": rx,
                      "pcie_tx_bps": tx}))
    return out


COPY_BOUND = Diagnostic(name="copy_bound", check=check, window_s=ESCALATE_S, for_s=FOR_S,
                        clear_s=CLEAR_S)
