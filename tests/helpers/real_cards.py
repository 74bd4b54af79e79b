"""The real recordings and nvidia-smi files under fixtures/nvidia/<card>/, read as the tests of
the diagnostics and the importers use them."""

from __future__ import annotations

from pathlib import Path

from gputop.diagnose import default_engine
from gputop.diagnose.types import Finding
from gputop.importers.formats import import_logs
from gputop.model import DeviceSample, Snapshot
from gputop.recording.reader import read_recording

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "nvidia"


def ticks(card: str, name: str) -> list[Snapshot]:
    """The snapshots of `NAME.jsonl.gz`, which must read whole."""
    result = read_recording(FIXTURES / card / f"{name}.jsonl.gz")
    assert result.warning is None
    return result.snapshots


def began(snaps: list[Snapshot], util: float) -> float:
    """The first tick whose NVML utilization reached `util`: the job's loop had begun."""
    return next(s.time for s in snaps if (s.devices[0].util_gpu or 0) >= util)


def findings(snaps: list[Snapshot]) -> list[Finding]:
    return default_engine(plugins=False).run(snaps)


def imported(card: str, name: str) -> DeviceSample:
    """The one GPU of an nvidia-smi file as the importers read it."""
    (snap,) = import_logs([(name, (FIXTURES / card / name).read_text(encoding="utf-8"))]).snapshots
    (gpu,) = snap.devices
    return gpu


def recorded(card: str, name: str, at: float | None = None) -> DeviceSample:
    """GPU 0 as the recorder read it: at the first tick, or the tick nearest `at`."""
    snaps = ticks(card, name)
    tick = snaps[0] if at is None else min(snaps, key=lambda s: abs(s.time - at))
    return tick.devices[0]
