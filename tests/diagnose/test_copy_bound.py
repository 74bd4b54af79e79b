"""R3 gpu.copy_bound: NVML says busy, GPM says no kernels, PCIe says copying."""

from __future__ import annotations

from gputop.diagnose import Engine
from gputop.diagnose.rules import copy_bound
from gputop.model import Missing
from gputop.testing.synthetic import node

T0 = 1_800_000_000.0
# The measured H2D copy loop on an H100: util 94.9 %, gract 0, smutil 0, PCIe RX 52,810 MiB/s.
COPYING = dict(util_gpu=95.0, gr_active=0.0, sm_active=0.0, pcie_rx=52_810 * (1 << 20),
               pcie_tx=2.0e8)


def test_a_gpu_busy_only_copying_is_copy_bound_after_its_hold() -> None:
    engine = Engine([copy_bound.COPY_BOUND])
    opened = None
    for t in range(200):
        s = node(2, time=T0 + t, **(COPYING if t >= 20 else {}))
        if engine.update(s) and opened is None:
            opened = t
    assert opened is not None and 20 + copy_bound.FOR_S <= opened <= 20 + copy_bound.FOR_S + 15
    f = engine.open_findings()[0]
    assert (f.id, f.severity) == ("gpu.copy_bound", "info")
    assert "95 % util" in f.title and "0 % busy" in f.title and "55 GB/s RX" in f.title
    assert "pinned memory" in f.fix and "non_blocking=True" in f.fix


def test_copying_for_five_minutes_is_a_warning() -> None:
    snaps = [node(1, time=T0 + t, **COPYING) for t in range(320)]
    (c,) = copy_bound.check(snaps[-int(copy_bound.ESCALATE_S) - 1:])
    assert c.severity == "warning"


def test_computing_while_copying_is_not_copy_bound() -> None:
    snaps = [node(1, time=T0 + t, **{**COPYING, "gr_active": 96.0}) for t in range(100)]
    assert Engine([copy_bound.COPY_BOUND]).run(snaps) == []


def test_before_hopper_without_gpm_it_does_not_guess() -> None:
    snaps = [node(1, time=T0 + t, **{**COPYING, "gr_active": Missing("unsupported")})
             for t in range(100)]
    assert Engine([copy_bound.COPY_BOUND]).run(snaps) == []
