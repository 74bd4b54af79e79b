"""The built-in diagnostics, one module per problem; each module names its thresholds and cites
where they come from (docs/diagnostics.md §8)."""

from __future__ import annotations

from gputop.diagnose.rules.copy_bound import COPY_BOUND
from gputop.diagnose.rules.health import LOST, MEMORY_ERRORS, NVLINK, PCIE, XID
from gputop.diagnose.rules.host_bound import HOST_BOUND
from gputop.diagnose.rules.memory import GROWTH, OOM_SOON, PRESSURE
from gputop.diagnose.rules.probe import FRAGMENTATION, HEADROOM
from gputop.diagnose.rules.starvation import STARVATION
from gputop.diagnose.rules.straggler import STRAGGLER
from gputop.diagnose.rules.throttle import POWER, THERMAL
from gputop.diagnose.types import Diagnostic

BUILTIN: tuple[Diagnostic, ...] = (
    LOST, MEMORY_ERRORS, PCIE, NVLINK, THERMAL, POWER, STARVATION, HOST_BOUND, COPY_BOUND,
    OOM_SOON, GROWTH, PRESSURE, STRAGGLER, FRAGMENTATION, HEADROOM,
    XID,
)

__all__ = ["BUILTIN"]
