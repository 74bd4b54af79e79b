"""Xid errors, end to end: the real NVML source and binding over the fake library, which delivers
Xids on NVML's event set; the finding they open; the recording, JSON and exporter that carry them;
the detail view that lists them."""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gputop.commands.main import main
from gputop.diagnose import Engine
from gputop.diagnose.rules import BUILTIN, health
from gputop.export.prometheus import ExportState, exposition, families
from gputop.model import Missing, Snapshot, XidEvent
from gputop.recording import RecordingWriter, from_record, read_recording, to_record
from gputop.report.summary import SummaryKeeper
from gputop.sources.nvml import XID_TAKE_MAX, NvmlSource
from gputop.sources.poller import Poller
from gputop.testing.fake_nvml import FakeNvml, Fault, XidAt
from gputop.testing.synthetic import node, series
from gputop.ui.screens.detail import title_content, xid_lines
from gputop.ui.view.status import CROSS

NOT_SUPPORTED, UNKNOWN = 3, 999
T0 = 1_800_000_000.0


def watched(snaps: list[Snapshot], xids: list[XidAt], faults: list[Fault] | None = None,
            ) -> tuple[list[Snapshot], list[list[Any]], FakeNvml, NvmlSource]:
    """Polls the real source once per recorded tick, as the dashboard does, and runs the
    built-in diagnostics over every snapshot."""
    clock = [snaps[0].time]
    engine = Engine(BUILTIN)
    with FakeNvml(snaps, xids=xids, faults=faults or []) as fake:
        src = NvmlSource(slow_interval=0)
        poller = Poller([src], clock=lambda: clock[0])
        poller.open()
        out, found = [], []
        for t, snap in enumerate(snaps):
            clock[0] = snap.time
            out.append(poller.poll_once())
            found.append(engine.update(out[-1]))
            if t + 1 < len(snaps):
                fake.advance()
        poller.close()
    return out, found, fake, src


def test_xid_79_on_gpu_3_at_tick_5_marks_it_lost_while_the_others_keep_updating() -> None:
    snaps = series(8, 4)
    ticks, found, _, _ = watched(snaps, [XidAt(tick=5, device=3, xid=79)])

    assert all(t.devices[3].lost is None and t.devices[3].xid_count == 0 for t in ticks[:5])
    for n, t in enumerate(ticks[5:], 5):
        gpu3 = t.devices[3]
        assert gpu3.lost == Missing("gpu_lost", since=snaps[5].time, detail="Xid 79")
        assert gpu3.util_gpu == Missing("gpu_lost", since=snaps[5].time)
        assert gpu3.xids == (XidEvent(xid=79, time=snaps[5].time),) and gpu3.xid_count == 1
        assert [d.util_gpu for d in t.devices[:3]] == [d.util_gpu for d in snaps[n].devices[:3]]
        assert all(d.xid_count == 0 and d.lost is None for d in t.devices[:3])
    said = [w for t in ticks for w in t.warnings]
    assert len(said) == 1 and "GPU 3" in said[0] and "Xid 79" in said[0]

    assert not any(f.id == "xid" for f in found[4])
    at5 = {(f.id, f.device): f for f in found[5]}
    xid = at5[("xid", 3)]
    assert xid.severity == "critical" and xid.since == snaps[5].time
    assert xid.title == "GPU3: Xid 79, GPU has fallen off the bus"
    assert "reboot the node" in xid.cause and "Reboot the node" in xid.fix
    assert xid.evidence == {"xid": 79, "count": 1, "first": snaps[5].time,
                            "last": snaps[5].time, "since_start": 1}
    assert at5[("gpu.lost", 3)].severity == "critical"
    assert {k for k in at5 if k[1] != 3} == set()  # the others are healthy


def test_xid_13_is_a_warning_that_points_at_the_application() -> None:
    snaps = series(4, 2)
    ticks, found, _, _ = watched(snaps, [XidAt(tick=2, device=0, xid=13),
                                         XidAt(tick=3, device=0, xid=13)])
    assert ticks[3].devices[0].lost is None
    assert ticks[3].devices[0].xid_count == 2
    f = next(f for f in found[3] if f.id == "xid")
    assert (f.severity, f.device, f.since) == ("warning", 0, snaps[2].time)
    assert f.title == "GPU0: Xid 13, Graphics Engine Exception, 2 Xids in 1 s"
    assert "restart the application" in f.cause
    assert "compute-sanitizer" in f.fix and "Restart the job" in f.fix
    assert f.evidence["count"] == 2 and f.evidence["first"] == snaps[2].time


def test_a_driver_that_answers_not_supported_gives_no_events_and_no_error() -> None:
    snaps = series(4, 2)
    ticks, found, fake, _ = watched(
        snaps, [XidAt(tick=1, device=0, xid=79)],
        faults=[Fault("nvmlDeviceRegisterEvents", NOT_SUPPORTED)])
    assert fake.calls["nvmlEventSetWait_v2"] == 0 and fake.calls["nvmlEventSetFree"] == 1
    for t in ticks:
        assert not t.warnings
        for d in t.devices:
            assert d.lost is None and d.xids == ()
            assert isinstance(d.xid_count, Missing) and d.xid_count.reason == "unsupported"
    assert not any(f.id == "xid" for fs in found for f in fs)
    text = exposition(families(ExportState(snapshot=ticks[-1], polled_at=T0, ok=True), T0))
    assert b"DCGM_FI_DEV_XID_ERRORS" not in text  # unknown is never exported as 0


def test_events_are_taken_at_each_poll_without_a_thread_and_the_set_is_freed_at_close() -> None:
    snaps = series(3, 2)
    before = {t.ident for t in threading.enumerate()}
    with FakeNvml(snaps, xids=[XidAt(tick=1, device=1, xid=13), XidAt(tick=1, device=1, xid=31),
                               XidAt(tick=2, device=0, xid=94)]) as fake:
        src = NvmlSource(slow_interval=0)
        src.open()
        ticks = [src.poll(snaps[0].time)]
        fake.advance()
        ticks.append(src.poll(snaps[1].time))
        fake.advance()
        ticks.append(src.poll(snaps[2].time))
        assert {t.ident for t in threading.enumerate()} == before
        # Each poll asks until the driver says Timeout: once with nothing, then per event.
        assert fake.calls["nvmlEventSetWait_v2"] == 1 + 3 + 2
        src.close()
        assert fake.calls["nvmlEventSetFree"] == 1
        assert fake.calls["nvmlInitWithFlags"] == fake.calls["nvmlShutdown"] == 1
    assert [d.xids for d in ticks[0].devices] == [(), ()]
    assert ticks[1].devices[1].xids == (XidEvent(13, snaps[1].time), XidEvent(31, snaps[1].time))
    assert ticks[2].devices[0].xids == (XidEvent(94, snaps[2].time),)
    assert [d.xid_count for d in ticks[2].devices] == [1, 2]


def test_a_storm_is_taken_over_several_polls_and_none_is_lost() -> None:
    snaps = series(3, 2)
    storm = [XidAt(tick=1, device=0, xid=13) for _ in range(XID_TAKE_MAX + 6)]
    with FakeNvml(snaps, xids=storm) as fake:
        src = NvmlSource(slow_interval=0)
        src.open()
        src.poll(snaps[0].time)
        fake.advance()
        first = src.poll(snaps[1].time)
        fake.advance()
        second = src.poll(snaps[2].time)
        src.close()
    assert first.devices[0].xid_count == XID_TAKE_MAX
    assert second.devices[0].xid_count == XID_TAKE_MAX + 6


def test_an_event_set_that_fails_stops_watching_and_says_why_once() -> None:
    snaps = series(5, 2)
    with FakeNvml(snaps, faults=[Fault("nvmlEventSetWait_v2", UNKNOWN, after=2)]) as fake:
        src = NvmlSource(slow_interval=0)
        src.open()
        ticks = []
        for snap in snaps:
            ticks.append(src.poll(snap.time))
            fake.advance()
        src.close()
        assert fake.calls["nvmlEventSetWait_v2"] == 3  # not asked again after it failed
        assert fake.calls["nvmlEventSetFree"] == 1
    said = [w for t in ticks for w in t.warnings]
    assert len(said) == 1 and said[0].startswith("Xid events are no longer watched:")
    assert all(d.xid_count == 0 for t in ticks for d in t.devices)  # none came: still true


# ----------------------------------------------------------------------------------------------
# The rule, over synthetic snapshots


def with_xids(t: float, xids: tuple[XidEvent, ...], count: int | None = None,
              n: int = 2) -> Snapshot:
    s = node(n, time=t)
    gpu0 = replace(s.devices[0], xids=xids, xid_count=len(xids) if count is None else count)
    return replace(s, devices=(gpu0, *s.devices[1:]))


def test_an_xid_finding_opens_at_once_and_clears_after_ten_quiet_minutes() -> None:
    engine = Engine([health.XID])
    ev = (XidEvent(xid=94, time=T0 + 10),)
    for t in range(10):
        assert engine.update(with_xids(T0 + t, ())) == []
    opened = engine.update(with_xids(T0 + 10, ev))
    assert [(f.id, f.severity, f.since) for f in opened] == [("xid", "warning", T0 + 10)]
    assert engine.update(with_xids(T0 + 10 + 599, ev))  # still open within the quiet period
    assert engine.update(with_xids(T0 + 10 + 600, ev)) == []
    (closed,) = engine.timeline()
    assert (closed.since, closed.until) == (T0 + 10, T0 + 610)


def test_an_unknown_xid_is_a_warning_that_points_to_nvidias_catalog() -> None:
    (c,) = health.check_xid([with_xids(T0, (XidEvent(xid=250, time=T0),))])
    assert c.severity == "warning"
    assert c.title == "GPU0: Xid 250, see NVIDIA's Xid catalog"
    assert "Xid catalog" in c.cause and "Xid 250" in c.fix


def test_the_worst_xid_names_the_finding_and_a_storm_is_counted_past_the_list() -> None:
    window = [with_xids(T0, (XidEvent(13, T0 - 5),), count=1)]
    storm = (*(XidEvent(13, T0 + i) for i in range(14)), XidEvent(48, T0 + 20),
             XidEvent(13, T0 + 30))
    window.append(with_xids(T0 + 30, storm, count=41))
    (c,) = health.check_xid(window)
    assert c.severity == "critical" and c.title.startswith("GPU0: Xid 48, Double Bit ECC Error")
    assert c.evidence["count"] == 40  # 41 - 1 since the window began, more than the 16 listed
    assert c.evidence["since_start"] == 41


def test_healthy_ticks_and_recordings_without_xids_stay_quiet() -> None:
    rec = to_record(node(2, time=T0))
    # Without Xids a tick is written as before gputop read them (the bundled demo is unchanged).
    assert not any({"xid_count", "xids"} & set(d) for d in rec["devices"].values())
    snap = from_record(rec)
    assert [(d.xid_count, d.xids) for d in snap.devices] == [(0, ()), (0, ())]
    assert health.check_xid([snap]) == []
    # The bundled demo's whole story (tests/report/test_recap.py) has no Xid finding either.


# ----------------------------------------------------------------------------------------------
# Where Xids go: recordings, --once --json, the exporter, the detail view


def test_a_recording_keeps_the_xids_and_their_times(tmp_path: Path) -> None:
    snaps = series(8, 4)
    ticks, _, _, _ = watched(snaps, [XidAt(tick=2, device=1, xid=13),
                                     XidAt(tick=5, device=3, xid=79)])
    path = tmp_path / "run.gputop"
    with RecordingWriter(path, keyframe_every=3, summarizer=SummaryKeeper()) as w:
        for t in ticks:
            w.write(t)
    back = read_recording(path).snapshots
    assert [[(d.xid_count, d.xids, d.lost) for d in s.devices] for s in back] == \
        [[(d.xid_count, d.xids, d.lost) for d in s.devices] for s in ticks]
    assert back[-1].devices[3].xids == (XidEvent(79, snaps[5].time),)


def test_once_json_lists_the_xids(capsys: pytest.CaptureFixture[str]) -> None:
    with FakeNvml([node(2)], xids=[XidAt(tick=0, device=1, xid=31)]):
        assert main(["--once", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    gpu0, gpu1 = doc["devices"]
    assert (gpu0["xid_count"], gpu0["xids"]) == (0, [])
    assert gpu1["xid_count"] == 1 and [x["xid"] for x in gpu1["xids"]] == [31]
    assert Snapshot.from_dict(doc).devices[1].xids[0].xid == 31


def test_the_exporter_serves_the_last_xid_as_dcgm_exporter_does() -> None:
    snaps = series(7, 4)
    ticks, _, _, _ = watched(snaps, [XidAt(tick=2, device=1, xid=13),
                                     XidAt(tick=4, device=1, xid=31),
                                     XidAt(tick=5, device=3, xid=79)])
    state = ExportState(snapshot=ticks[-1], polled_at=T0 + 10, ok=True, hostname="n1")
    text = exposition(families(state, T0 + 10)).decode()
    assert "# TYPE DCGM_FI_DEV_XID_ERRORS gauge" in text
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    xid = {s.labels["gpu"]: s for s in fams["DCGM_FI_DEV_XID_ERRORS"].samples}
    assert set(xid) == {"0", "1", "2", "3"}  # a lost GPU keeps its last Xid
    assert (xid["0"].value, xid["0"].labels["err_code"], xid["0"].labels["err_msg"]) == \
        (0, "0", "No Error")
    assert (xid["1"].value, xid["1"].labels["err_msg"]) == (31, "GPU memory page fault")
    assert (xid["3"].value, xid["3"].labels["err_msg"]) == (79, "GPU has fallen off the bus")
    assert xid["3"].labels["UUID"] == ticks[-1].devices[3].uuid
    total = {s.labels["gpu"]: s.value for s in fams["gputop_xid_events"].samples
             if s.name == "gputop_xid_events_total"}
    assert total == {"0": 0, "1": 2, "2": 0, "3": 1}


def test_the_detail_view_lists_the_newest_xids_with_their_meaning() -> None:
    s = with_xids(T0 + 60, (XidEvent(13, T0), XidEvent(48, T0 + 30)))
    lines = [c.plain for c in xid_lines(s.devices[0], 28)]
    assert lines[0].split() == ["Xid", "events", "2", "since", "gputop", "started"]
    assert f"{CROSS} Xid 48" in lines[1] and "Double Bit ECC Error" in lines[1]
    assert "▲ Xid 13" in lines[2] and "Graphics Engine Exception" in lines[2]
    assert xid_lines(s.devices[1], 28) == []  # nothing at all for a GPU without Xids
    assert "XID 48" in title_content(s.devices[0], T0 + 60).plain
    assert "XID" not in title_content(s.devices[0], T0 + 30 + 3601).plain  # an hour later
