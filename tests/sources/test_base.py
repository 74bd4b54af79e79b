"""What a source hands again: values that held still are last tick's very objects."""

from __future__ import annotations

import math

from gputop.model import Missing
from gputop.sources.base import held, keep_equal


def test_equal_values_become_last_ticks_objects_and_the_rest_stay_as_read() -> None:
    last = {"mem": 80 << 30, "temp": 55.0, "reasons": ("gpu_idle",), "util": 40.0,
            "lost": Missing("unsupported")}
    now = {"mem": int(str(80 << 30)), "temp": float("55"), "reasons": tuple(["gpu_idle"]),
           "util": 41.0, "lost": Missing("unsupported"), "new": 3.5}
    assert now["mem"] is not last["mem"] and now["temp"] is not last["temp"]
    read = dict(now)
    keep_equal(now, last)
    assert now == read  # the same values
    for name in ("mem", "temp", "reasons", "lost"):
        assert now[name] is last[name]
    assert now["util"] is read["util"] and now["new"] is read["new"]


def test_a_value_of_another_type_or_sign_is_not_taken_for_last_ticks() -> None:
    last = {"a": 1, "b": 1.0, "c": True, "z": 0.0, "n": math.nan}
    now = {"a": 1.0, "b": 1, "c": 1, "z": -0.0, "n": math.nan}
    read = dict(now)
    keep_equal(now, last)
    assert all(now[k] is read[k] for k in now)
    assert math.copysign(1.0, now["z"]) == -1.0


def test_an_object_whose_fields_all_held_still_stands_for_the_new_one() -> None:
    from types import SimpleNamespace

    was = SimpleNamespace(mem=80 << 30, temp=55.0, util=40.0)
    values = {"mem": int(str(80 << 30)), "temp": float("55"), "util": 40.0}
    assert held(values, was)
    assert all(values[k] is getattr(was, k) for k in values)
    moved = {"mem": int(str(80 << 30)), "temp": 56.0, "util": 40.0}
    assert not held(moved, was)
    assert moved["mem"] is was.mem and moved["temp"] == 56.0  # the still one is kept all the same
