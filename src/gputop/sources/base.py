"""The interface every GPU source implements, and what one poll of it returns."""

from __future__ import annotations

import math
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from gputop.model import DeviceSample, LinkSample, ProcessSample, Topology


@dataclass
class GpuTick:
    """What one GPU source saw in one poll. Processes carry only GPU-side facts; the host source
    adds user, command line, CPU and job."""

    devices: list[DeviceSample] = field(default_factory=list)
    processes: list[ProcessSample] = field(default_factory=list)
    links: list[LinkSample] = field(default_factory=list)
    topology: Topology | None = None
    warnings: list[str] = field(default_factory=list)


@dataclass
class SourceInfo:
    backend: str  # "nvml" | "amdsmi"
    driver_version: str | None = None
    cuda_version: str | None = None
    nvml_version: str | None = None
    rocm_version: str | None = None


class GpuSource(Protocol):
    """A GPU vendor backend. `open` raises BackendUnavailable (with a one-line reason) when the
    vendor library, driver or GPUs are not there. `poll` blocks (vendor calls are synchronous), so
    callers run it in a thread; it never raises for one device's trouble: a lost GPU or an
    unsupported metric becomes a Missing in the sample."""

    name: str

    def open(self) -> SourceInfo: ...

    def poll(self, now: float) -> GpuTick: ...

    def close(self) -> None: ...


def keep_equal(values: MutableMapping[str, Any], last: Mapping[str, Any]) -> None:
    """Puts back into `values` the very objects of `last` (last tick's values of the same
    fields) where they are equal: a number that held still is then last tick's number, and what
    follows a poll (the recording's patch, its summary) passes over the fields whose values are
    the very same objects. Equal means of the same type with the same value; a zero keeps its
    sign."""
    for name, v in values.items():
        old = last.get(name, _ABSENT)
        if old is not v and type(old) is type(v) and old == v and (
                type(v) is not float or v or math.copysign(1.0, v) == math.copysign(1.0, old)):
            values[name] = old


def held(values: MutableMapping[str, Any], was: object) -> bool:
    """`keep_equal` of `values` against the same fields of `was` (last tick's object); whether
    every one of them is now `was`'s own, so that `was` stands for an object made of them."""
    keep_equal(values, {k: getattr(was, k) for k in values})
    return all(getattr(was, k) is v for k, v in values.items())


_ABSENT = object()
