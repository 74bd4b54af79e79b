"""The engine's window over its history: the rules see the same ticks and the same numbers as
from a plain list, and each tick is read once however many rules and windows look at it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from gputop.diagnose import window as w
from gputop.diagnose.window import History
from gputop.model import Missing, Snapshot
from gputop.testing.synthetic import node

T0 = 1_800_000_000.0


def ticks(n: int) -> list[Snapshot]:
    out = []
    for t in range(n):
        s = node(2, time=T0 + t, util_gpu=float(t % 7 * 10), processes=False)
        hot = ("sw_thermal",) if t % 3 else ()
        d1 = replace(s.devices[1], throttle=hot, temp_gpu=Missing("stale") if t == 5 else 60.0,
                     throttle_time={"sw_power_cap": 10.0 + t * 0.5})
        out.append(replace(s, devices=(s.devices[0], d1)))
    return out


def history(snaps: list[Snapshot]) -> History:
    h = History()
    for s in snaps:
        h.append(s)
    return h


def test_a_window_is_the_sequence_of_its_ticks() -> None:
    snaps = ticks(20)
    win = history(snaps).since(T0 + 5)
    plain = snaps[5:]
    assert len(win) == 15 and list(win) == plain and list(reversed(win)) == plain[::-1]
    assert win[0] is plain[0] and win[-1] is plain[-1]
    assert list(win[2:6]) == plain[2:6] and list(win[::2]) == plain[::2]
    assert list(w.last(win, 4)) == list(w.last(plain, 4)) == plain[-5:]
    assert w.times(win) == [s.time for s in plain]


def test_the_helpers_read_the_same_numbers_from_a_window_and_a_list() -> None:
    snaps = ticks(30)
    win, plain = history(snaps).since(T0), snaps
    for index in (0, 1):
        for name in ("util_gpu", "temp_gpu", "fan"):
            assert w.series(win, index, name) == w.series(plain, index, name)
            assert w.field_values(win, index, name) == w.field_values(plain, index, name)
        assert w.busy_values(win, index) == w.busy_values(plain, index)
        for reason in ("sw_thermal", "sw_power_cap", "hw_slowdown"):
            assert w.reason_share(win, index, reason) == w.reason_share(plain, index, reason)
            assert w.bit_run(win, index, reason) == w.bit_run(plain, index, reason)
            assert w.throttle_series(win, index, reason) == w.throttle_series(plain, index,
                                                                              reason)
    assert w.field_values(plain, 1, "temp_gpu") == [60.0] * 29  # the stale tick is skipped
    assert w.reason_share(plain, 1, "sw_thermal") == 20 / 30  # from the bits
    assert w.counter_growth(plain, 1, "sw_power_cap") == (14.5, 29.0)  # from the counter


def counted_util(calls: list[float]) -> Callable[[Snapshot, int], float]:
    """A column's function that notes the time of each tick it reads."""
    def util(s: Snapshot, index: int) -> float:
        calls.append(s.time)
        return float(s.devices[index].util_gpu)  # type: ignore[arg-type]

    return util


def test_each_tick_is_read_once_however_many_windows_ask() -> None:
    calls: list[float] = []
    util = counted_util(calls)

    h = History()
    for s in ticks(50):
        h.append(s)
        for seconds in (10, 30):
            assert w.column(h.since(s.time - seconds), util, 0) == [
                float(x.devices[0].util_gpu) for x in h.snaps if x.time >= s.time - seconds]
    assert len(calls) == 50


def test_what_was_read_from_forgotten_ticks_is_forgotten() -> None:
    snaps = ticks(40)
    h = history(snaps[:20])
    w.column(h.since(T0), lambda s, pid: pid, 77)  # read while the process ran, then never
    for s in snaps[20:]:
        h.append(s)
    w.column(h.since(T0 + 30), w._value, 0, "util_gpu")
    h.forget_before(T0 + 35)
    assert len(h) == 5
    assert [len(col) for col in h.columns.values()] == [5]


def test_a_process_is_called_by_the_script_a_runner_module_runs() -> None:
    def called(*argv: str) -> str:
        p = node(1).processes[0]
        return w.command(replace(p, cmdline=argv, name="python3"))

    assert called("python3", "-m", "gputop.probe", "tools/train.py", "--lr", "3") == "train.py"
    assert called("python", "-m", "gputop.probe", "--interval", "2", "-m", "pkg.train") == (
        "pkg.train")
    assert called("python", "-m", "torch.distributed.run", "--nproc-per-node", "8",
                  "train.py") == "train.py"
    assert called("python", "-m", "pkg.train", "-m", "x") == "pkg.train"
    assert called("python", "-m", "gputop.probe") == "gputop.probe"
    assert called("python", "/srv/job/train.py", "-m", "x") == "train.py"


def holey(n: int) -> list[Snapshot]:
    """Ticks with readings missing here and there, a GPU lost now and then, no GPM on GPU0 at
    all, and the clock-event counters reset once."""
    out = []
    for t, s in enumerate(ticks(n)):
        d0, d1 = s.devices
        d0 = replace(d0, gr_active=Missing("unsupported"),
                     util_gpu=Missing("stale") if t % 7 == 3 else d0.util_gpu,
                     throttle_time=Missing("stale") if t % 5 == 1 else
                     {"sw_thermal": float(t % 40), "sw_power_cap": 2.0 * t})
        if t % 11 == 6:
            d1 = replace(d1, lost=Missing("gpu_lost"))
        out.append(replace(s, devices=(d0, d1)))
    return out


def test_a_window_reads_the_same_as_a_list_where_ticks_are_missing_and_old_ones_forgotten(
) -> None:
    snaps = holey(200)
    h = History()
    for k, s in enumerate(snaps):
        h.append(s)
        h.forget_before(s.time - 60)
        kept = [x for x in snaps[:k + 1] if x.time >= s.time - 60]
        for seconds in (5, 20, 60):
            win, plain = h.since(s.time - seconds), [x for x in kept if x.time >= s.time - seconds]
            for index in (0, 1):
                for name in ("util_gpu", "gr_active", "temp_gpu"):
                    assert w.field_values(win, index, name) == w.field_values(plain, index, name)
                    assert w.series(win, index, name) == w.series(plain, index, name)
                    assert w.field_readings(win, index, name) == w.field_readings(plain, index,
                                                                                  name)
                    assert w.field_mean(win, index, name) == w.field_mean(plain, index, name)
                assert w.busy_mean(win, index) == w.busy_mean(plain, index)
                for reason in ("sw_thermal", "sw_power_cap"):
                    assert w.counter_growth(win, index, reason) == w.counter_growth(
                        plain, index, reason)
                    assert w.reason_share(win, index, reason) == w.reason_share(
                        plain, index, reason)
    assert w.field_values(h.since(T0), 0, "gr_active") == []
    assert len(w.field_values(h.since(T0), 0, "util_gpu")) == 52  # 9 of the 61 kept are missing
    assert h.dropped == 139 and all(g[0] >= h.dropped for g in h.gaps.values())


def test_a_figure_kept_for_a_tick_is_worked_out_again_at_the_next() -> None:
    snaps = ticks(10)
    h = history(snaps[:5])
    assert w.field_mean(h.since(T0), 0, "util_gpu") == 20.0  # 0, 10, 20, 30, 40
    h.append(snaps[5])
    h.forget_before(T0 + 1)  # the same places in the history now hold other ticks
    assert w.field_mean(h.since(T0), 0, "util_gpu") == 30.0  # 10 ... 50
    assert w.busy_mean(h.since(T0), 0) == ("gr_active", 96.0)


def test_a_column_keeps_what_its_reads_reach_and_works_out_again_what_a_longer_one_wants(
) -> None:
    snaps = holey(400)
    h = History()
    for k, s in enumerate(snaps):
        h.append(s)
        h.forget_before(s.time - 300)
        h.trim_columns()
        kept = [x for x in snaps[:k + 1] if x.time >= s.time - 300]
        # 10 s every tick, and the whole five minutes only every 97 ticks, as a rule that
        # looks back further only when something holds
        for seconds in (10, 300) if k % 97 == 96 else (10,):
            win, plain = h.since(s.time - seconds), [x for x in kept if x.time >= s.time - seconds]
            for index in (0, 1):
                assert w.field_readings(win, index, "util_gpu") == w.field_readings(
                    plain, index, "util_gpu")
                assert w.field_values(win, index, "temp_gpu") == w.field_values(
                    plain, index, "temp_gpu")
                assert w.series(win, index, "util_gpu") == w.series(plain, index, "util_gpu")
                for reason in ("sw_thermal", "sw_power_cap"):
                    assert w.counter_growth(win, index, reason) == w.counter_growth(
                        plain, index, reason)
        if k == 95:  # before the first long read: 10 s and the margins kept of 96 ticks
            assert max(len(col) for col in h.columns.values()) <= (
                10 + w.TRIM_MARGIN_S + w.TRIM_EVERY_S + 1)
    # after a five-minute read, its columns keep five minutes
    assert len(h.columns[(w._value, 0, "util_gpu")]) > 290
    assert all(g[0] >= h.dropped for g in h.gaps.values())


def test_trimmed_values_are_worked_out_again_only_when_asked() -> None:
    calls: list[float] = []
    util = counted_util(calls)

    h = History()
    for s in ticks(100):
        h.append(s)
        h.trim_columns()
        w.column(h.since(s.time - 5), util, 0)
    assert len(calls) == 100  # each tick once while no read reaches back further
    kept = len(h.columns[(util, 0)])
    assert kept < 50
    assert w.column(h.since(T0), util, 0) == [float(s.devices[0].util_gpu)  # type: ignore[arg-type]
                                              for s in ticks(100)]
    assert len(calls) == 100 + 100 - kept  # the dropped ticks read again, once
    assert sorted(calls[100:]) == [T0 + t for t in range(100 - kept)]
