"""Snapshots read back from JSON or a recording are the Snapshots that were written: same values,
same defaults, still frozen, whichever way `from_dict` builds them."""

from __future__ import annotations

import dataclasses
from dataclasses import replace

import pytest

from gputop.model import (
    ChildProcess,
    DeviceSample,
    JobInfo,
    LinkSample,
    Missing,
    ProbeStats,
    ProcessSample,
    Snapshot,
    from_dict,
    mark_all,
)
from gputop.recording import SnapshotDecoder, from_record, to_record
from gputop.testing.synthetic import GIB, node

T0 = 1_800_000_000.0


def busy_node(t: float = T0) -> Snapshot:
    s = node(2, time=t, links=4)
    p = ProcessSample(pid=7, device_index=1, gpu_mem=3 * GIB, cmdline=("python", "x.py"),
                      job=JobInfo(slurm_job_id="9"), children=(ChildProcess(8, "w", 99.0, 1),),
                      probe=ProbeStats(ts=t, allocated=GIB, wait_frac=0.3,
                                       recent_wait_frac=0.01, batch_sizes=((8, 2 * GIB),)),
                      user=Missing("not_visible"))
    gone = Missing("gpu_lost", since=t)
    lost = replace(mark_all(s.devices[0], gone), lost=gone)
    return replace(s, devices=(lost, s.devices[1]), processes=(*s.processes, p),
                   warnings=("GPU0 fell off the bus",))


def test_json_and_record_form_read_back_equal() -> None:
    s = busy_node()
    assert Snapshot.from_dict(s.to_dict()) == s
    assert from_record(to_record(s)) == s
    back = from_record(to_record(s))
    assert repr(back) == repr(s)
    with pytest.raises(dataclasses.FrozenInstanceError):
        back.devices[1].util_gpu = 1.0  # type: ignore[misc]


def test_absent_fields_take_their_defaults_and_unknown_keys_are_ignored() -> None:
    link = from_dict(LinkSample, {"device_index": 0, "link": 3, "kind": "nvlink",
                                  "from_a_newer_gputop": 1})
    assert link == LinkSample(device_index=0, link=3, kind="nvlink")
    dev = from_dict(DeviceSample, {"index": 0, "vendor": "nvidia", "name": "x", "uuid": "u",
                                   "pci_bus_id": "b", "fan": None,
                                   "unavailable": {"power_draw": {"reason": "unsupported"}}})
    assert dev.fan == Missing("error", detail="null without a reason")
    assert dev.power_draw == Missing("unsupported") and dev.mig_devices == ()
    # a probe recorded before it published its share over the last few steps
    probe = from_dict(ProbeStats, {"ts": T0, "steps": 9, "wait_frac": 0.3})
    assert probe.wait_frac == 0.3 and probe.recent_wait_frac is None


def test_a_missing_required_field_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="link"):
        from_dict(LinkSample, {"device_index": 0, "kind": "nvlink"})
    with pytest.raises(TypeError):
        from_dict(DeviceSample, {"index": 0, "unavailable": {}, "fan": None})


def test_a_part_decoded_over_the_last_one_is_the_part_decoded_afresh() -> None:
    """from_dict_over decodes only some keys of a record and keeps the other fields of the part
    decoded before: the fields of every kind come out as from_dict makes them."""
    from gputop.model import from_dict_over

    s = busy_node()
    rec = to_record(s)
    worker = rec["processes"]["1:7"]
    changed = {"cmdline": ["python", "y.py"],
               "children": [{"pid": 9, "name": "v", "cpu_percent": 1.0, "rss": 5}],
               "probe": {"ts": T0 + 1, "batch_sizes": [[4, GIB]]}, "job": {"pod_name": "p"},
               "gpu_mem": 5 * GIB}
    want = from_dict(ProcessSample, {**worker, **changed})
    got = from_dict_over(s.processes[-1], changed)
    assert got == want and repr(got) == repr(want)
    live = rec["devices"]["1"]
    changed = {"lost": {"reason": "gpu_lost", "since": T0 + 5}, "throttle": ["hw_slowdown"]}
    want_dev = from_dict(DeviceSample, {**live, **changed})
    got_dev = from_dict_over(s.devices[1], changed)
    assert got_dev == want_dev and repr(got_dev) == repr(want_dev)
    assert got_dev.util_gpu is s.devices[1].util_gpu  # the fields not named are the old ones'
    with pytest.raises(dataclasses.FrozenInstanceError):
        got_dev.util_gpu = 1.0  # type: ignore[misc]


def test_the_decoder_shares_what_did_not_change_between_ticks() -> None:
    a, b = busy_node(T0), replace(busy_node(T0 + 1), links=busy_node(T0).links)
    ra = to_record(a)
    rb = {**ra, "time": b.time}  # a merge patch that changed only the time
    dec = SnapshotDecoder()
    sa, sb = dec.decode(ra), dec.decode(rb)
    assert sa == a and sb == replace(a, time=b.time)
    assert sb.links[0] is sa.links[0] and sb.devices[1] is sa.devices[1]


def test_a_memo_keeps_the_shape_of_every_object_handed_again_and_only_those() -> None:
    from gputop.model import DictMemo

    first = node(2, links=2)
    assert first.topology is not None and first.system is not None
    # The next tick: the same topology, system facts and links, a new host and devices.
    second = replace(first, time=first.time + 1, host=replace(first.host, cpu_percent=55.0),
                     devices=tuple(replace(d, util_gpu=12.0) for d in first.devices))
    memo = DictMemo()
    a = to_record(first, memo)
    memo.next_tick()
    b = to_record(second, memo)
    assert b == to_record(second)  # the same record as without the memo
    assert b["topology"] is a["topology"] and b["system"] is a["system"]
    assert b["host"] is not a["host"] and b["host"]["cpu_percent"] == 55.0
    assert all(b["links"][k] is a["links"][k] for k in a["links"])
    assert all(b["devices"][k]["util_gpu"] == 12.0 for k in b["devices"])


def test_the_models_replace_is_dataclasses_replace() -> None:
    from gputop import model

    s = busy_node()
    objs = [s, *s.devices, *s.processes, *s.links, Missing("unsupported"),
            ProbeStats(ts=T0), JobInfo(), ChildProcess(pid=8, name="w", cpu_percent=1.0, rss=9)]
    for obj in objs:
        name = dataclasses.fields(obj)[0].name
        first = getattr(obj, name)
        changed = model.replace(obj, **{name: first})
        assert changed == replace(obj, **{name: first}) and changed is not obj
        assert type(changed) is type(obj)
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(changed, name, first)
    lk = s.links[0]
    assert model.replace(lk, rx=5.0, tx=6.0) == replace(lk, rx=5.0, tx=6.0)
    assert model.replace(lk) == lk
    with pytest.raises(TypeError, match="no field bogus"):
        model.replace(lk, bogus=1)
    with pytest.raises(ValueError):  # a class with checks of its own still runs them
        model.replace(Missing("unsupported"), reason="nonsense")
