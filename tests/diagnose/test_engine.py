"""The engine: `for` before a finding opens, hysteresis before it closes, plug-ins, failures."""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from gputop.diagnose import Condition, Diagnostic, Engine, default_engine
from gputop.diagnose.engine import BROKEN_ID
from gputop.diagnose.rules import BUILTIN
from gputop.model import HostSample, Snapshot
from gputop.testing.synthetic import node

T0 = 1_800_000_000.0
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "gputop-diag-example"


def hot_host(window: Sequence[Snapshot]) -> list[Condition]:
    """A toy diagnostic: the host CPU is above 50 % at the newest tick."""
    cpu = window[-1].host.cpu_percent
    if isinstance(cpu, float) and cpu > 50:
        return [Condition(id="test.hot", severity="warning", title=f"host at {cpu:.0f} %",
                          cause="", fix="", evidence={"cpu": cpu}, score=cpu)]
    return []


HOT = Diagnostic(name="hot", check=hot_host, window_s=10.0, for_s=20.0, every_s=0.0)


def ticks(pattern: str, start: float = T0) -> list[Snapshot]:
    """One tick a second: '#' the host is hot, '.' it is not."""
    base = node(1, processes=False)
    return [replace(base, time=start + i, host=HostSample(cpu_percent=90.0 if c == "#" else 10.0))
            for i, c in enumerate(pattern)]


def test_a_condition_opens_only_after_holding_for_its_duration() -> None:
    engine = Engine([HOT])
    opened = [s.time - T0 for s in ticks("." * 5 + "#" * 40) if engine.update(s)]
    assert opened[0] == 5 + 20  # held from t=5, open at t=25
    f = engine.open_findings()[0]
    assert f.since == T0 + 5 and f.until is None and f.open


def test_a_flickering_condition_does_not_open_and_close_repeatedly() -> None:
    # Held 30 s (opens), then flickers with gaps shorter than the `for`, then stops for good.
    pattern = "#" * 30 + "..#####...####.#....####" + "." * 40
    timeline = Engine([HOT]).run(ticks(pattern))
    assert len(timeline) == 1
    f = timeline[0]
    assert f.since == T0 and f.until == T0 + pattern.rindex("#") + 1


def test_a_condition_that_never_holds_for_its_duration_never_opens() -> None:
    assert Engine([HOT]).run(ticks(("#" * 15 + ".") * 10)) == []


def test_a_finding_keeps_the_numbers_of_its_worst_moment() -> None:
    base = ticks("#" * 60)
    snaps = [replace(s, host=HostSample(cpu_percent=99.0 if i == 40 else 60.0))
             for i, s in enumerate(base)]
    f = Engine([HOT]).run(snaps)[0]
    assert f.title == "host at 99 %" and f.evidence == {"cpu": 99.0}


def test_the_window_is_bounded_by_time() -> None:
    seen: list[int] = []

    def count(window: Sequence[Snapshot]) -> list[Condition]:
        seen.append(len(window))
        return []

    engine = Engine([Diagnostic(name="n", check=count, window_s=30.0, every_s=0.0)])
    engine.run(ticks("." * 100))
    assert max(seen) == 31 and len(engine._window) == 31


def test_out_of_order_ticks_are_ignored() -> None:
    engine = Engine([HOT])
    snaps = ticks("#" * 30)
    for s in snaps:
        engine.update(s)
    assert engine.update(snaps[3]) == engine.open_findings()


def test_a_diagnostic_that_raises_is_switched_off_and_reported_once() -> None:
    def boom(window: Sequence[Snapshot]) -> list[Condition]:
        raise ZeroDivisionError("division by zero")

    engine = Engine([Diagnostic(name="boom", check=boom, every_s=0.0), HOT])
    timeline = engine.run(ticks("#" * 40))
    broken = [f for f in timeline if f.id == BROKEN_ID]
    assert len(broken) == 1 and broken[0].severity == "warning"
    assert "'boom'" in broken[0].title and "ZeroDivisionError" in broken[0].title
    assert any(f.id == "test.hot" for f in timeline)  # the others still run


def _nvlink_node(t: int) -> Snapshot:
    """A 4-GPU NVLink node at second `t`: GPU 1's link 3 counts replays from 400 s, GPU 2's
    link 5 goes down at 650 s, GPU 0 leaks 40 MiB/s from 200 s."""
    s = node(4, time=T0 + t, links=18, processes=False)
    leak = 40 * (1 << 20) * max(0, t - 200)
    devices = (replace(s.devices[0], mem_used=s.devices[0].mem_used + leak), *s.devices[1:])
    links = tuple(
        replace(lk, errors={**lk.errors, "replay": max(0, t - 400) // 10})
        if (lk.device_index, lk.link) == (1, 3) else
        replace(lk, up=t < 650) if (lk.device_index, lk.link) == (2, 5) else lk
        for lk in s.links)
    return replace(s, devices=devices, links=links)


def test_the_links_of_old_ticks_are_dropped_and_the_findings_are_the_same() -> None:
    # mem.growth and xid look back ten minutes and read no links: past the five minutes of the
    # rules that do, a tick's links are dropped, and every finding is as with all of them kept.
    snaps = [_nvlink_node(t) for t in range(900)]
    kept = Engine([replace(d, reads_links=True) for d in BUILTIN])
    dropped = Engine(BUILTIN)
    assert kept.run(snaps) == dropped.run(snaps)
    assert {f.id for f in dropped.timeline()} >= {"mem.growth", "nvlink.errors", "nvlink.down"}
    history = dropped._window
    newest = history.times[-1]
    assert history.times[0] <= newest - 599
    assert all(not s.links for s in history.snaps if s.time < newest - 300)
    assert all(len(s.links) == 72 for s in history.snaps if s.time >= newest - 300)


def _entry_points(*eps: importlib.metadata.EntryPoint):  # type: ignore[no-untyped-def]
    def fake(**kw: object) -> list[importlib.metadata.EntryPoint]:
        assert kw == {"group": "gputop.diagnostics"}
        return list(eps)
    return fake


def test_the_example_plugin_loads_through_its_entry_point_and_runs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The entry point exactly as the example's pyproject.toml declares it; nothing is installed.
    toml = (EXAMPLE / "pyproject.toml").read_text()
    section = toml.split('[project.entry-points."gputop.diagnostics"]', 1)[1]
    name, value = re.search(r'^(\w+)\s*=\s*"([^"]+)"', section, re.MULTILINE).groups()  # type: ignore[union-attr]
    monkeypatch.syspath_prepend(str(EXAMPLE / "src"))
    ep = importlib.metadata.EntryPoint(name=name, value=value, group="gputop.diagnostics")
    monkeypatch.setattr(importlib.metadata, "entry_points", _entry_points(ep))

    engine = default_engine()
    assert "ecc_corrected_rising" in [d.name for d in engine.diagnostics]
    snaps = [node(2, time=T0 + t, ecc_corrected=5 * t) for t in range(30)]
    found = [f for f in engine.run(snaps) if f.id == "ecc.corrected_rising"]
    assert {f.device for f in found} == {0, 1}
    assert found[0].severity == "warning" and "corrected ECC errors" in found[0].title


def test_a_broken_plugin_is_a_warning_finding_not_a_crash(
        monkeypatch: pytest.MonkeyPatch) -> None:
    missing = importlib.metadata.EntryPoint(
        name="gone", value="gputop_no_such_module:DIAG", group="gputop.diagnostics")
    wrong = importlib.metadata.EntryPoint(name="wrong", value="os:sep", group="gputop.diagnostics")
    monkeypatch.setattr(importlib.metadata, "entry_points", _entry_points(missing, wrong))
    engine = default_engine()
    found = engine.update(node(2, time=T0))
    titles = [f.title for f in found if f.id == BROKEN_ID]
    assert any("'gone'" in t and "ModuleNotFoundError" in t for t in titles)
    assert any("'wrong'" in t and "not a gputop Diagnostic" in t for t in titles)
    assert len(engine.notes) == 2


def _installed(site: Path, entry_points: str) -> None:
    """A distribution installed into `site` as pip lays it out, with these entry points."""
    info = site / "gputop_diag_example-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: gputop-diag-example\n"
                                   "Version: 0.1\n")
    (info / "entry_points.txt").write_text(entry_points)


_ENGINE = ("import sys\nfrom gputop.diagnose import default_engine\n"
           "names = [d.name for d in default_engine().diagnostics]\n"
           "print('ecc_corrected_rising' in names, 'importlib.metadata' in sys.modules)")


def test_an_installed_plugin_is_found_through_its_distribution(tmp_path: Path) -> None:
    toml = (EXAMPLE / "pyproject.toml").read_text()
    section = toml.split('[project.entry-points."gputop.diagnostics"]', 1)[1]
    name, value = re.search(r'^(\w+)\s*=\s*"([^"]+)"', section, re.MULTILINE).groups()  # type: ignore[union-attr]
    _installed(tmp_path / "site", f"[console_scripts]\nx = y:z\n\n"
                                  f"[gputop.diagnostics]\n{name} = {value}\n")
    path = os.pathsep.join([str(tmp_path / "site"), str(EXAMPLE / "src")])
    r = subprocess.run([sys.executable, "-c", _ENGINE], capture_output=True, text=True,
                       check=True, env={**os.environ, "PYTHONPATH": path})
    assert r.stdout.split() == ["True", "True"]


def test_without_a_plugin_the_package_metadata_library_is_not_loaded(tmp_path: Path) -> None:
    # Other entry points of other packages do not count; the library is 1.6 MiB resident.
    _installed(tmp_path / "site", "[console_scripts]\ngputop-diag = x:y\n")
    r = subprocess.run([sys.executable, "-c", _ENGINE], capture_output=True, text=True,
                       check=True, env={**os.environ, "PYTHONPATH": str(tmp_path / "site")})
    assert r.stdout.split() == ["False", "False"]


def test_diagnostics_do_not_import_textual() -> None:
    code = ("import sys\nimport gputop.diagnose, gputop.report.recap, gputop.report.summary\n"
            "from gputop.diagnose.rules import BUILTIN\n"
            "print(','.join(m for m in sys.modules if m.split('.')[0] in ('textual', 'rich')))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == ""
