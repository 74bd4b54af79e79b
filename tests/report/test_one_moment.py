"""One `nvidia-smi -q -x` dump, the thing pasted into a ticket, gets its verdicts: imported as a
one-tick recording, `gputop report` names a braked, throttled or failing GPU, and stays quiet on
an idle one. The dumps are a real Tesla T4's (tests/data/realdata, MIT, telegraf) with the one
field a fault changes edited in."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gputop.commands.main import main as gputop_main
from gputop.commands.report import main as report_main

T4 = (Path(__file__).resolve().parents[1] / "data" / "realdata" / "nvidia-smi-xml"
      / "tesla-t4_x1_drv515_telegraf.xml").read_text()


def edit(text: str, **tags: str) -> str:
    """The dump with the text of each `<tag>` (the first one found) replaced."""
    for tag, value in tags.items():
        text, n = re.subn(rf"<{tag}>[^<]*</{tag}>", f"<{tag}>{value}</{tag}>", text, count=1)
        assert n == 1, tag
    return text


def report(tmp_path: Path, capsys: pytest.CaptureFixture[str], xml: str) -> dict:
    n = len(list(tmp_path.glob("*.xml")))  # a new recording each time
    log, rec = tmp_path / f"dump{n}.xml", tmp_path / f"dump{n}.gputop"
    log.write_text(xml)
    assert gputop_main(["import", "-o", str(rec), str(log)]) == 0
    capsys.readouterr()
    assert report_main([str(rec), "--json"]) == 0
    doc: dict = json.loads(capsys.readouterr().out)
    assert doc["ticks"] == 1
    return doc


def verdicts(doc: dict) -> list[tuple[str, str]]:
    return sorted((f["id"], f["severity"]) for f in doc["findings"])


BRAKED = dict(clocks_throttle_reason_hw_slowdown="Active",
              clocks_throttle_reason_hw_power_brake_slowdown="Active")


def test_the_real_t4_dump_as_it_is_says_nothing(tmp_path, capsys) -> None:
    # Idle at P0, SM at 585 of 1590 MHz and PCIe at x8 of x16: an idle link narrows, and no
    # clock-event reason is active.
    assert verdicts(report(tmp_path, capsys, T4)) == []


def test_a_power_brake_with_the_clocks_cut_is_critical_from_one_dump(tmp_path, capsys) -> None:
    doc = report(tmp_path, capsys, edit(T4, **BRAKED, sm_clock="210 MHz"))
    assert verdicts(doc) == [("power.brake", "critical")]
    (f,) = doc["findings"]
    assert f["title"] == "GPU0 HW power brake: SM clock 210 of 1590 MHz"
    assert f["start"] == f["opened"] == doc["start"]  # shown at once: began and shown agree


def test_hw_slowdown_and_hw_thermal_need_the_clocks_cut(tmp_path, capsys) -> None:
    slow = dict(clocks_throttle_reason_hw_slowdown="Active")
    assert verdicts(report(tmp_path, capsys, edit(T4, **slow, sm_clock="1590 MHz"))) == []
    assert verdicts(report(tmp_path, capsys, edit(T4, **slow, sm_clock="300 MHz"))) == [
        ("hw.slowdown", "critical")]
    hot = dict(clocks_throttle_reason_hw_thermal_slowdown="Active", sm_clock="300 MHz")
    assert verdicts(report(tmp_path, capsys, edit(T4, **hot))) == [("thermal.hw", "critical")]
    # Leaving rest, the bit may flicker with the clock still low (NVML header): no cut.
    waking = edit(T4, **slow, clocks_throttle_reason_gpu_idle="Active", sm_clock="300 MHz")
    assert verdicts(report(tmp_path, capsys, waking)) == []


def test_sw_thermal_slowdown_is_a_warning(tmp_path, capsys) -> None:
    doc = report(tmp_path, capsys, edit(T4, clocks_throttle_reason_sw_thermal_slowdown="Active"))
    assert verdicts(doc) == [("thermal.sw", "warning")]


def test_a_sw_power_cap_under_load_or_at_rest_is_no_fault(tmp_path, capsys) -> None:
    loaded = edit(T4, clocks_throttle_reason_sw_power_cap="Active", gpu_util="100 %",
                  current_link_width="16x")
    assert verdicts(report(tmp_path, capsys, loaded)) == []
    resting = edit(T4, clocks_throttle_reason_sw_power_cap="Active", performance_state="P8",
                   sm_clock="300 MHz")
    assert verdicts(report(tmp_path, capsys, resting)) == []


def test_memory_errors_from_one_dump(tmp_path, capsys) -> None:
    lifetime = T4.replace("<aggregate>\n                <sram_correctable>0</sram_correctable>\n"
                          "                <sram_uncorrectable>0",
                          "<aggregate>\n                <sram_correctable>0</sram_correctable>\n"
                          "                <sram_uncorrectable>2")
    assert lifetime != T4
    assert verdicts(report(tmp_path, capsys, lifetime)) == [("ecc.lifetime", "warning")]
    volatile = edit(T4, sram_uncorrectable="1")  # the first: the volatile count
    assert ("ecc.uncorrected", "critical") in verdicts(report(tmp_path, capsys, volatile))
    pending = edit(T4, pending_retirement="Yes")
    assert verdicts(report(tmp_path, capsys, pending)) == [("ecc.retire_pending", "warning")]


def test_a_pcie_link_below_its_max_under_load(tmp_path, capsys) -> None:
    doc = report(tmp_path, capsys, edit(T4, gpu_util="92 %"))
    assert verdicts(doc) == [("pcie.downtrained", "warning")]
    assert "Gen3 x8 under load (max Gen3 x16)" in doc["findings"][0]["title"]


def test_a_lost_gpu(tmp_path, capsys) -> None:
    doc = report(tmp_path, capsys, edit(T4, gpu_util="GPU is lost", memory_util="GPU is lost"))
    assert ("gpu.lost", "critical") in verdicts(doc)


def test_the_text_report_of_one_dump_says_when_it_began_and_was_shown(tmp_path, capsys) -> None:
    log, rec = tmp_path / "dump.xml", tmp_path / "dump.gputop"
    log.write_text(edit(T4, **BRAKED, sm_clock="210 MHz"))
    assert gputop_main(["import", "-o", str(rec), str(log)]) == 0
    capsys.readouterr()
    assert report_main([str(rec)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert next(ln for ln in lines if ln.startswith("BEGAN")).split()[:3] == [
        "BEGAN", "SHOWN", "END"]
    row = next(ln for ln in lines if "power.brake" in ln).split()
    assert row[0] == row[1] and row[3] == "CRITICAL"
