"""Turning logs people already have into recordings: nvidia-smi --query-gpu CSV, dmon, pmon and
rocm-smi --json.

Expected values from real files were read by eye from the file named in the test (see
tests/data/realdata/ATTRIBUTION.md for where each comes from). Logs of shapes no real sample shows
(several GPUs, `noheader`, `nounits`, `-o DT`, damaged lines) are small texts written here in the
shape nvidia-smi and rocm-smi print.
"""

from __future__ import annotations

import calendar
import json
import subprocess
import sys
from pathlib import Path

import pytest

from gputop.commands.main import main as gputop_main
from gputop.commands.report import main as report_main
from gputop.errors import GputopError
from gputop.importers.formats import import_logs, parse_start, sniff
from gputop.importers.nvsmi_csv import parse_query_gpu_csv
from gputop.importers.nvsmi_dmon import parse_dmon
from gputop.importers.nvsmi_monitor import DASH
from gputop.importers.nvsmi_pmon import parse_pmon
from gputop.importers.nvsmi_values import ABSENT
from gputop.importers.rocm_smi import ABSENT as ROCM_ABSENT
from gputop.importers.rocm_smi import parse_rocm_smi_json
from gputop.model import Missing
from gputop.recording import read_recording, read_summary

DATA = Path(__file__).resolve().parents[1] / "data" / "realdata"
CSV, MON, ROCM = DATA / "nvidia-smi-csv", DATA / "dmon-pmon", DATA / "rocm-smi-json"
H100_CSV = CSV / "nvidia-h100-80gb-hbm3_x1_drv590.48.01_linux_load_query-gpu.csv"
H100_MIG_CSV = CSV / "nvidia-h100-mig_x1_drv590.48.01_linux_load_query-gpu.csv"
H100_APPS_CSV = CSV / "nvidia-h100-80gb-hbm3_x1_drv590.48.01_linux_load_compute-apps.csv"
RTX2080_2021_CSV = (
    CSV / "rtx-2080-super_x1_drv471.11-windows_2021_query-gpu-all-fields_nvidia-gpu-exporter.csv")
V100_CSV = CSV / "v100-32gb-dgx2-aau_x1_2020_util-l5_mostly-busy-with-dips_aicloud-docs.csv"
H100_DMON = MON / "nvidia-h100-80gb-hbm3_x1_drv590.48.01_linux_load_dmon.txt"
H100_PMON = MON / "nvidia-h100-80gb-hbm3_x1_drv590.48.01_linux_load_pmon.txt"
H100_MIG_DMON = MON / "nvidia-h100-mig_x1_drv590.48.01_linux_load_dmon.txt"
WINDOWS_PMON = MON / "nvidia-geforce-rtx-2080-super_x1_drv591.86_windows_load_pmon.txt"
MI210_JSON = ROCM / "mi210_x1_rocm-smi-showallinfo-json_drv5.18.13_wandb.json"
MiB = 2**20
NA = Missing("unsupported")


def text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> float:
    return float(calendar.timegm((year, month, day, hour, minute, second)))


# ----------------------------------------------------------------------------------------------
# nvidia-smi --query-gpu CSV


def test_an_h100_row_lands_in_every_field_with_gputop_units():
    (snap,) = parse_query_gpu_csv(text(H100_CSV))
    (gpu,) = snap.devices
    assert snap.time == pytest.approx(utc(2026, 7, 14, 8, 12, 53) + 0.353)
    assert snap.system.driver_version == "590.48.01" and snap.warnings == ()
    assert (gpu.index, gpu.vendor, gpu.name) == (0, "nvidia", "NVIDIA H100 80GB HBM3")
    assert (gpu.uuid, gpu.pci_bus_id) == ("GPU-00000000-0000-0000-0000-000000000000",
                                          "00000000:00:09.0")
    assert (gpu.util_gpu, gpu.util_mem, gpu.enc_util, gpu.dec_util) == (100.0, 11.0, 0.0, 0.0)
    # "81559 MiB" -> bytes
    assert (gpu.mem_total, gpu.mem_reserved, gpu.mem_used, gpu.mem_free) == (
        81559 * MiB, 479 * MiB, 19818 * MiB, 61263 * MiB)
    assert (gpu.temp_gpu, gpu.temp_mem, gpu.temp_margin) == (59.0, 54.0, 26.0)
    assert (gpu.power_draw, gpu.power_limit, gpu.power_default_limit) == (631.95, 700.0, 700.0)
    assert (gpu.clock_sm, gpu.clock_mem, gpu.clock_sm_max, gpu.clock_mem_max) == (
        1980, 2619, 1980, 2619)
    assert (gpu.pstate, gpu.persistence_mode, gpu.compute_capability, gpu.mig_enabled) == (
        0, True, "9.0", False)
    assert (gpu.pcie_gen, gpu.pcie_gen_max, gpu.pcie_width, gpu.pcie_width_max) == (5, 5, 16, 16)
    assert gpu.fan == NA  # "[N/A]": an SXM board has no fan
    assert gpu.throttle == ()
    assert gpu.throttle_time == dict.fromkeys(
        ("sw_power_cap", "sync_boost", "sw_thermal", "hw_thermal", "hw_power_brake"), 0.0)
    assert (gpu.ecc_enabled, gpu.ecc_corrected, gpu.ecc_uncorrected) == (True, 0, 0)
    assert (gpu.remapped_corrected, gpu.remapped_uncorrected, gpu.remap_pending,
            gpu.remap_failed) == (0, 0, False, False)
    # What --query-gpu has no field for is said to be absent from the file, not unsupported.
    assert gpu.energy_j == ABSENT and gpu.pcie_rx == ABSENT
    assert snap.processes == () and snap.host.cpu_percent == ABSENT


def test_a_2021_windows_log_uses_the_old_throttle_names_and_many_placeholders():
    (snap,) = parse_query_gpu_csv(text(RTX2080_2021_CSV))
    (gpu,) = snap.devices
    assert gpu.throttle == ("gpu_idle",)  # clocks_throttle_reasons.gpu_idle = Active
    assert gpu.throttle_time == ABSENT  # no counters before 2023
    assert gpu.temp_mem == NA  # "N/A", no brackets
    assert gpu.persistence_mode == NA  # "[N/A]" on Windows
    assert gpu.ecc_enabled == NA and gpu.ecc_corrected == NA
    assert gpu.mem_reserved == ABSENT  # no memory.reserved field in 2021
    assert (gpu.fan, gpu.pstate, gpu.clock_sm, gpu.clock_mem_max) == (38.0, 8, 111, 7751)


def test_sw_power_cap_reads_active_on_an_idle_2080():
    (snap,) = parse_query_gpu_csv(text(
        CSV / "nvidia-geforce-rtx-2080-super_x1_drv595.71.05_linux_idle_query-gpu.csv"))
    assert snap.devices[0].throttle == ("sw_power_cap",)
    assert snap.devices[0].throttle_time["sw_power_cap"] == pytest.approx(212.553937)


def test_a_mig_gpu_has_no_device_utilization():
    (snap,) = parse_query_gpu_csv(text(H100_MIG_CSV))
    assert snap.devices[0].util_gpu == NA
    assert snap.devices[0].mig_enabled is True


EIGHT_ROWS_NOUNITS = """\
timestamp, index, name, utilization.gpu [%], memory.used [MiB], power.draw [W], temperature.gpu
2024/05/01 12:00:00.101, 0, NVIDIA A100-SXM4-80GB, 97, 70000, 390.12, 61
2024/05/01 12:00:00.104, 1, NVIDIA A100-SXM4-80GB, 12, 1024, 95.50, 40
2024/05/01 12:00:01.102, 0, NVIDIA A100-SXM4-80GB, 98, 70001, 391.00, 62
2024/05/01 12:00:01.105, 1, NVIDIA A100-SXM4-80GB, [N/A], 1025, [Not Supported], 41
2024/05/01 12:00:02.101, 0, NVIDIA A100-SXM4-80GB, 99, 70002, 392.00, 63
2024/05/01 12:00:02.104, 1, NVIDIA A100-SXM4-80GB, 14, [Insufficient Permissions], 96.00, 42
"""


def test_rows_of_several_gpus_are_grouped_into_one_snapshot_per_moment():
    snaps = parse_query_gpu_csv(EIGHT_ROWS_NOUNITS)
    assert [len(s.devices) for s in snaps] == [2, 2, 2]
    assert [s.time for s in snaps] == pytest.approx(
        [utc(2024, 5, 1, 12, 0, t) + 0.101 + 0.001 * (t == 1) for t in range(3)])
    first = snaps[0]
    assert [d.index for d in first.devices] == [0, 1]
    # `nounits`: the unit comes from the header, "memory.used [MiB]".
    assert first.devices[0].mem_used == 70000 * MiB
    assert first.devices[1].power_draw == 95.5 and first.devices[1].temp_gpu == 40.0


def test_placeholders_become_missing_with_the_right_reason():
    snaps = parse_query_gpu_csv(EIGHT_ROWS_NOUNITS)
    assert snaps[1].devices[1].util_gpu == NA
    assert snaps[1].devices[1].power_draw == Missing("unsupported", detail="Not Supported")
    assert snaps[2].devices[1].mem_used == Missing("no_permission")
    assert snaps[2].devices[1].lost is None


def test_a_gpu_that_fell_off_the_bus_is_marked_lost_from_when_it_was_first_seen_so():
    log = ("timestamp, index, utilization.gpu [%]\n"
           "2024/05/01 12:00:00.000, 0, 50 %\n"
           "2024/05/01 12:00:01.000, 0, [GPU is lost]\n"
           "2024/05/01 12:00:02.000, 0, [GPU is lost]\n")
    snaps = parse_query_gpu_csv(log)
    assert snaps[0].devices[0].lost is None
    assert snaps[2].devices[0].lost == Missing("gpu_lost", since=utc(2024, 5, 1, 12, 0, 1))
    assert snaps[2].devices[0].util_gpu == Missing("gpu_lost")


def test_a_noheader_log_reads_with_the_query_list_and_short_field_names():
    fields = ("timestamp,gpu_name,index,clocks.sm,clocks.mem,clocks.max.sm,"
              "clocks_throttle_reasons.active")
    log = ("2024/05/01 12:00:00.000, NVIDIA L4, 0, 2040 MHz, 6250 MHz, 2040 MHz, 0x00000005\n"
           "2024/05/01 12:00:01.000, NVIDIA L4, 0, 1500 MHz, 6250 MHz, 2040 MHz, 0x00000000\n")
    with pytest.raises(ValueError, match="--query-gpu"):
        parse_query_gpu_csv(log)
    snaps = parse_query_gpu_csv(log, fields=fields.split(","))
    gpu = snaps[0].devices[0]
    assert (gpu.name, gpu.clock_sm, gpu.clock_mem, gpu.clock_sm_max) == (
        "NVIDIA L4", 2040, 6250, 2040)
    assert gpu.throttle == ("gpu_idle", "sw_power_cap")  # bits 0x1 and 0x4
    assert snaps[1].devices[0].throttle == ()


def test_a_truncated_or_garbled_line_is_skipped_and_said():
    log = (EIGHT_ROWS_NOUNITS.replace("2024/05/01 12:00:01.102, 0", "2024/13/01 12:00:01.102, 0")
           + "garbage that is not a row\n"
           + "2024/05/01 12:00:03.101, 0, NVIDIA A100-SXM4-80GB, 9")  # cut off mid-line
    snaps = parse_query_gpu_csv(log)
    assert [len(s.devices) for s in snaps] == [2, 1, 2]
    assert snaps[0].warnings == ("line 4 skipped: unreadable timestamp '2024/13/01 12:00:01.102'",)
    assert snaps[-1].warnings == (
        "line 8 skipped: 1 values where the header names 7",
        "line 9 skipped: 4 values where the header names 7",
    )


def test_without_a_timestamp_column_moments_follow_start_and_interval_and_it_is_said():
    log = "index, utilization.gpu [%]\n0, 10 %\n1, 20 %\n0, 30 %\n1, 40 %\n"
    snaps = parse_query_gpu_csv(log, start=utc(2024, 5, 1), interval=5.0)
    assert [s.time for s in snaps] == [utc(2024, 5, 1), utc(2024, 5, 1, 0, 0, 5)]
    assert [d.util_gpu for d in snaps[1].devices] == [30.0, 40.0]
    assert snaps[0].warnings == ("no timestamp column: moments are taken 5 s apart from "
                                 "2024-05-01 00:00:00 UTC (set them with --start and --interval)",)
    assert snaps[1].warnings == ()


# ----------------------------------------------------------------------------------------------
# nvidia-smi dmon and pmon


def test_an_h100_dmon_log_gives_power_temperatures_utilization_and_clocks():
    snaps = parse_dmon(text(H100_DMON),
                       start=utc(2024, 5, 1), interval=1.0)
    assert len(snaps) == 5 and [s.time - snaps[0].time for s in snaps] == [0, 1, 2, 3, 4]
    gpu = snaps[0].devices[0]
    assert (gpu.index, gpu.power_draw, gpu.temp_gpu, gpu.temp_mem) == (0, 631.0, 63.0, 57.0)
    assert (gpu.util_gpu, gpu.util_mem, gpu.enc_util, gpu.dec_util) == (100.0, 10.0, 0.0, 0.0)
    assert (gpu.clock_mem, gpu.clock_sm) == (2619, 1980)
    assert gpu.mem_used == ABSENT and gpu.throttle == ABSENT and gpu.power_limit == ABSENT
    assert "the dmon log has no times" in snaps[0].warnings[0]


def test_a_dash_in_dmon_is_missing():
    (gpu,) = parse_dmon(text(H100_MIG_DMON))[0].devices
    assert gpu.util_gpu == DASH and gpu.util_mem == DASH
    assert DASH.reason == "unsupported"
    assert gpu.power_draw == 438.0


DMON_DT = """\
#Date     Time     gpu  pwr gtemp mtemp  sm mem    fb rxpci txpci pviol tviol sbecc dbecc pci
#YYYYMMDD HH:MM:SS Idx    W     C     C   %   %    MB  MB/s  MB/s     %  bool  errs  errs errs
 20240104 13:54:35   0  301    61    70  99  40 71000   120    80     0     0     0     0   0
 20240104 13:54:35   1  250    58    66  97  38 70000   110    75    12     0     1     0   2
 20240104 13:54:36   0  305    61    70  99  41 71002   121    81     0     0     0     0   0
 20240104 13:54:36   1  248    58     -  95  37 70000   109    74     0     1     1     0   2
"""


def test_dmon_with_dates_and_several_gpus():
    snaps = parse_dmon(DMON_DT)
    assert [s.time for s in snaps] == [utc(2024, 1, 4, 13, 54, 35), utc(2024, 1, 4, 13, 54, 36)]
    assert snaps[0].warnings == ()
    g0, g1 = snaps[0].devices
    assert g0.mem_used == 71000 * MiB and g0.pcie_rx == 120 * MiB
    assert (g1.ecc_corrected, g1.ecc_uncorrected, g1.pcie_replays) == (1, 0, 2)
    assert g0.throttle == () and g1.throttle == ("sw_power_cap",)  # pviol 12 %
    assert snaps[1].devices[1].throttle == ("sw_thermal",) and snaps[1].devices[1].temp_mem == DASH


def test_dmon_with_times_only_takes_the_date_from_start_and_crosses_midnight():
    log = ("#Time        gpu    pwr     sm\n#HH:MM:SS    Idx      W      %\n"
           " 23:59:59      0    100     50\n 00:00:00      0    101     51\n")
    snaps = parse_dmon(log, start=utc(2024, 2, 28, 12))
    assert [s.time for s in snaps] == [utc(2024, 2, 28, 23, 59, 59), utc(2024, 2, 29)]
    assert "no dates" in snaps[0].warnings[0]


def test_a_damaged_dmon_line_is_skipped_and_said():
    log = DMON_DT.replace(" 20240104 13:54:36   0  305", " 20240104 13:54:36   0")
    snaps = parse_dmon(log)
    assert [len(s.devices) for s in snaps] == [2, 1]
    assert snaps[0].warnings == ("line 5 skipped: 15 values where the header names 16",)


def test_pmon_gives_each_moments_processes():
    snaps = parse_pmon(text(H100_PMON))
    assert len(snaps) == 5 and all(len(s.processes) == 3 for s in snaps)
    memhog, _, burn = snaps[0].processes
    assert (burn.pid, burn.device_index, burn.kind, burn.name) == (11345, 0, "compute", "gpu_burn")
    assert (burn.sm_util, burn.mem_util) == (99.0, 10.0)
    assert memhog.sm_util == DASH and memhog.gpu_mem == ABSENT
    # pmon knows nothing of the device: a placeholder carries its index.
    assert [d.index for d in snaps[0].devices] == [0] and snaps[0].devices[0].util_gpu == ABSENT


def test_pmon_of_an_idle_gpu_has_moments_without_processes():
    snaps = parse_pmon(text(MON / "nvidia-l40s_x1_drv595.80_linux_idle_pmon.txt"))
    assert len(snaps) == 5 and all(s.processes == () for s in snaps)


def test_pmon_on_windows_repeats_its_header_mid_moment_and_has_names_with_spaces():
    snaps = parse_pmon(text(WINDOWS_PMON))
    assert [len(s.processes) for s in snaps] == [12, 12, 12, 12, 12]
    share = next(p for p in snaps[0].processes if p.pid == 4680)
    assert (share.name, share.kind) == ("NVIDIA Share.exe", "compute+graphics")


def test_dmon_and_pmon_logs_taken_together_become_one_run():
    out = import_logs([("dmon.txt", text(H100_DMON)),
                       ("pmon.txt", text(H100_PMON))],
                      start=utc(2024, 5, 1))
    assert out.format == "dmon+pmon" and len(out.snapshots) == 5
    snap = out.snapshots[2]
    assert snap.devices[0].power_draw == 633.0
    assert [p.pid for p in snap.processes] == [11327, 11328, 11345]
    assert out.warnings[0].startswith("dmon.txt: the dmon log has no times")


# ----------------------------------------------------------------------------------------------
# rocm-smi --json


def test_four_mi100s_map_as_the_amd_source_maps_them():
    (snap,) = parse_rocm_smi_json(text(ROCM / "mi100_x4_rocm602_telegraf.json"))
    assert [d.index for d in snap.devices] == [0, 1, 2, 3]
    gpu = snap.devices[0]
    assert (gpu.vendor, gpu.name) == ("amd", "Arcturus GL-XL [Instinct MI100]")
    assert (gpu.uuid, gpu.pci_bus_id) == ("0x79ccd55167a2124a", "0000:83:00.0")
    assert (gpu.util_gpu, gpu.util_mem) == (0.0, 0.0)
    assert (gpu.temp_gpu, gpu.temp_mem) == (55.0, 53.0)  # junction (hotspot) first, as amdsmi
    assert (gpu.power_draw, gpu.power_limit) == (36.0, 290.0)
    assert (gpu.mem_total, gpu.mem_used) == (34342961152, 6750208)
    assert gpu.mem_free == 34342961152 - 6750208
    assert (gpu.clock_sm, gpu.clock_mem) == (300, 1200)
    assert (gpu.pcie_gen, gpu.pcie_width, gpu.pcie_replays, gpu.numa_node) == (4, 16, 0, 1)
    assert gpu.pstate == Missing("unsupported", detail="AMD GPU")
    assert gpu.throttle == ROCM_ABSENT
    assert snap.system.driver_version == "6.3.6" and snap.system.backends == ("rocm-smi",)


def test_rocm_smi_na_with_a_reason_is_unsupported_with_that_reason():
    (snap,) = parse_rocm_smi_json(text(ROCM / "rx6700xt_rocm602_telegraf.json"))
    gpu = snap.devices[0]
    assert gpu.power_draw == Missing("unsupported", detail="Secondary die")
    assert gpu.uuid == ""  # "Unique ID": "N/A"
    assert gpu.clock_mem == 96


def test_old_rocm_smi_names_and_energy_and_clock_ranges():
    (old,) = parse_rocm_smi_json(text(ROCM / "rx6700xt_rocm430_telegraf.json"))
    assert old.devices[0].name == "AMD GPU 0x73df"  # "Card series": "0x1002" names nothing
    (mi210,) = parse_rocm_smi_json(text(MI210_JSON))
    gpu = mi210.devices[0]
    assert gpu.energy_j == pytest.approx(93668579.2586811)  # µJ -> J
    assert (gpu.clock_sm, gpu.clock_sm_max, gpu.clock_mem_max) == (800, 1700, 1600)
    assert gpu.mem_total == ROCM_ABSENT


def test_rocm_smi_processes_are_attached_only_where_the_gpu_is_known():
    (six,) = parse_rocm_smi_json(text(ROCM / "mi100_x6_rocm571_telegraf.json"))
    assert six.processes == ()  # "PID104225": "mlir-cpu-runner, 0, ...": on no GPU
    one = json.loads(text(ROCM / "rx6700xt_rocm602_telegraf.json"))
    one["system"]["PID4242"] = "python3, 1, 1073741824, 0, 0"
    (snap,) = parse_rocm_smi_json(json.dumps(one))
    (proc,) = snap.processes
    assert (proc.pid, proc.device_index, proc.name, proc.gpu_mem) == (4242, 0, "python3", 2**30)
    four = json.loads(text(ROCM / "mi100_x4_rocm602_telegraf.json"))
    four["system"]["PID4242"] = "python3, 2, 1073741824, 0, 0"
    (snap,) = parse_rocm_smi_json(json.dumps(four))
    assert snap.processes == ()
    assert "1 processes left out: rocm-smi does not say which of the 4 GPUs" in snap.warnings[-1]


def test_a_rocm_smi_loop_log_is_one_moment_per_line_and_a_cut_line_is_skipped():
    card = json.loads(text(ROCM / "rx6700xt_rocm602_telegraf.json"))
    lines = []
    for use in (10, 20, 30):
        card["card0"]["GPU use (%)"] = str(use)
        lines.append(json.dumps(card))
    log = "\n".join([*lines, lines[0][:100]]) + "\n"
    snaps = parse_rocm_smi_json(log, start=utc(2024, 5, 1), interval=2.0)
    assert [s.devices[0].util_gpu for s in snaps] == [10.0, 20.0, 30.0]
    assert [s.time for s in snaps] == [utc(2024, 5, 1, 0, 0, t) for t in (0, 2, 4)]
    assert "rocm-smi prints no times" in snaps[0].warnings[0]
    assert snaps[-1].warnings[-1].startswith("line 4 skipped: not readable JSON")


# ----------------------------------------------------------------------------------------------
# Telling formats apart


@pytest.mark.parametrize(("path", "kind"), [
    (H100_CSV, "csv"),
    (V100_CSV, "csv"),
    (H100_APPS_CSV, "compute-apps"),
    (H100_DMON, "dmon"),
    (H100_PMON, "pmon"),
    (ROCM / "mi100_x4_rocm602_telegraf.json", "rocm-smi"),
    (DATA / "nvidia-smi-xml" / "tesla-t4_x1_drv515_telegraf.xml", "xml"),
])
def test_the_kind_of_a_file_is_told_from_its_content(path: Path, kind: str):
    assert sniff(text(path)) == kind


def test_dmon_with_dates_and_noheader_csv_are_told_too():
    assert sniff(DMON_DT) == "dmon"
    assert sniff("2024/05/01 12:00:00.000, 0, 45 %\n") == "csv"


ROCM_SMI_TABLE = """\
============================ ROCm System Management Interface ============================
====================================== Concise Info ======================================
Device  [Model : Revision]    Temp        Power     Partitions      SCLK    MCLK    Fan  Perf
0       [0x74a1 : 0x00]       35.0°C      133.0W    NPS1, SPX       131Mhz  900Mhz  0%   auto
"""


@pytest.mark.parametrize("content", [ROCM_SMI_TABLE, "hello\n", "", "a,b,c\n1,2,3\n", "{}\n"])
def test_a_file_of_an_unknown_kind_is_a_one_line_error_naming_the_formats(content: str):
    with pytest.raises(GputopError) as e:
        import_logs([("odd.txt", content)])
    message = str(e.value)
    assert message.startswith("odd.txt: not a log gputop can import; it reads nvidia-smi -q -x")
    assert "dmon" in message and "pmon" in message and "rocm-smi --json" in message
    assert "\n" not in message


def test_a_compute_apps_log_says_what_to_record_instead():
    with pytest.raises(GputopError, match=r"--query-compute-apps log.*pmon"):
        import_logs([("apps.csv", text(H100_APPS_CSV))])


def test_a_forced_format_that_does_not_fit_names_the_file():
    with pytest.raises(GputopError, match=r"^d\.txt: no line of the rocm-smi|^d\.txt: no rocm-smi"):
        import_logs([("d.txt", DMON_DT)], fmt="rocm-smi")
    assert len(import_logs([("x", EIGHT_ROWS_NOUNITS)], fmt="csv").snapshots) == 3


def test_device_logs_of_two_kinds_are_not_mixed():
    with pytest.raises(GputopError, match="mix csv and dmon"):
        import_logs([("a.csv", EIGHT_ROWS_NOUNITS), ("b.txt", DMON_DT)])


def test_start_reads_iso_dates_as_utc_and_epoch_seconds():
    assert parse_start("2024-05-01T12:00:00") == utc(2024, 5, 1, 12)
    assert parse_start("2024-05-01 14:00:00+02:00") == utc(2024, 5, 1, 12)
    assert parse_start("1714564800") == utc(2024, 5, 1, 12)
    with pytest.raises(GputopError, match="--start"):
        parse_start("yesterday")


# ----------------------------------------------------------------------------------------------
# End to end: gputop import, then gputop report


def test_a_real_csv_log_imports_and_reports_the_numbers_of_the_log(tmp_path, capsys):
    log = V100_CSV
    out = tmp_path / "v100.gputop"
    assert gputop_main(["import", "-o", str(out), str(log)]) == 0
    assert "17 snapshots (csv) written" in capsys.readouterr().err
    assert read_recording(out).header["meta"] == {"imported_from": "csv"}

    assert read_summary(out)["recap"]["ticks"] == 17  # imported files end with a summary too

    assert report_main([str(out), "--json"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert captured.err == ""  # read from the summary
    assert report["ticks"] == 17
    assert report["start"] == pytest.approx(utc(2020, 11, 12, 13, 48, 11) + 0.412)
    assert report["end"] == pytest.approx(utc(2020, 11, 12, 13, 49, 31) + 0.451)
    (gpu,) = report["devices"]
    # utilization.gpu over the 17 rows: 32 and 35 % dips among 97-100 %.
    assert gpu["util_pct"] == {"p50": 99.0, "p95": 100.0, "max": 100.0}
    used = 30994 * MiB  # memory.used is 30994 MiB throughout
    assert gpu["mem_used_bytes"] == {"p50": used, "p95": used, "max": used}
    assert gpu["power_w"] is None and gpu["temp_c"] is None  # not in the log


def test_an_unknown_file_through_the_command_is_one_line(tmp_path, capsys):
    odd = tmp_path / "notes.txt"
    odd.write_text("just some notes\n")
    assert gputop_main(["import", "-o", str(tmp_path / "x.gputop"), str(odd)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"gputop: {odd}: not a log gputop can import")
    assert not (tmp_path / "x.gputop").exists()


def test_dmon_and_pmon_through_the_command_keep_processes_and_warn(tmp_path, capsys):
    out = tmp_path / "h100.gputop"
    rc = gputop_main(["import", "-o", str(out), "--start", "2024-05-01T12:00:00",
                      str(H100_DMON),
                      str(H100_PMON)])
    assert rc == 0
    err = capsys.readouterr().err
    assert "gputop: warning:" in err and "dmon log has no times" in err
    rec = read_recording(out)
    assert rec.header["meta"] == {"imported_from": "dmon+pmon"}
    assert rec.snapshots[0].time == utc(2024, 5, 1, 12)
    assert [p.name for p in rec.snapshots[-1].processes] == ["memhog", "memhog", "gpu_burn"]


def test_importing_logs_does_not_load_the_ui():
    code = ("import sys, gputop.importers.formats\n"
            "print(','.join(m for m in sys.modules if m.split('.')[0] in ('textual', 'rich')))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == ""


# ----------------------------------------------------------------------------------------------
# What the import says


UNTIMED_CSV = "index, utilization.gpu [%]\n0, 10 %\n0, 30 %\n"


def test_with_both_start_and_interval_given_the_warning_asks_for_neither():
    result = import_logs([("u.csv", UNTIMED_CSV)], start=utc(2024, 5, 1), interval=5.0)
    assert result.warnings == ["u.csv: no timestamp column: moments are taken 5 s apart from "
                               "2024-05-01 00:00:00 UTC, as --start and --interval say"]
    assert [s.time for s in result.snapshots] == [utc(2024, 5, 1), utc(2024, 5, 1, 0, 0, 5)]


@pytest.mark.parametrize(("start", "interval", "ask"), [
    (None, None, "(set them with --start and --interval)"),
    (0.0, None, "(set the spacing with --interval)"),
    (None, 2.0, "(set when the log began with --start)"),
])
def test_the_warning_asks_only_for_what_was_not_given(start, interval, ask):
    (warning,) = import_logs([("u.csv", UNTIMED_CSV)], start=start, interval=interval).warnings
    assert warning.endswith(ask)


def test_a_log_from_a_loop_with_both_given_through_the_command(tmp_path, capsys):
    log = tmp_path / "u.csv"
    log.write_text(UNTIMED_CSV)
    assert gputop_main(["import", "-o", str(tmp_path / "u.gputop"), "--start", "1714521600",
                        "--interval", "5", str(log)]) == 0
    err = capsys.readouterr().err
    assert "as --start and --interval say" in err and "set them" not in err


NOHEADER_NO_STAMP = ("0, NVIDIA H100 80GB HBM3, 45 %, 81559 MiB, 312.40 W\n"
                     "1, NVIDIA H100 80GB HBM3, 47 %, 81559 MiB, [N/A]\n")


@pytest.mark.parametrize("fmt", ["auto", "csv"])
def test_a_noheader_csv_without_the_query_list_is_told_to_give_it(fmt: str):
    with pytest.raises(GputopError) as e:
        import_logs([("nh.csv", NOHEADER_NO_STAMP)], fmt=fmt)
    assert str(e.value) == ("nh.csv: no header line naming --query-gpu fields: for a log written "
                            "with `noheader`, pass the fields with --query-gpu")
    fields = ["index", "name", "utilization.gpu", "memory.total", "power.draw"]
    (snap,) = import_logs([("nh.csv", NOHEADER_NO_STAMP)], query_gpu=fields).snapshots
    assert [d.util_gpu for d in snap.devices] == [45.0, 47.0]


def test_a_topology_of_another_number_of_gpus_than_the_log_is_warned_about():
    from gputop.importers.nvsmi_topo import parse_topo_matrix

    topo = parse_topo_matrix(text(DATA / "nvidia-smi-topo" /
                                  "rtx-6000-ada_x4_pcie-only-2numa_cx7-nics_drv575_stelline.txt"))
    result = import_logs([("h100.csv", text(H100_CSV))], topology=topo)
    assert ("the --topo matrix has 4 GPUs but the logs show 1: is it of the same machine? "
            "(attached as given)") in result.warnings
    assert result.snapshots[0].topology == topo
    one = parse_topo_matrix(text(DATA / "nvidia-smi-topo" /
                                 "nvidia-h100-80gb-hbm3_x1_drv590.48.01_linux_topo-m_single-gpu_ansi.txt"))
    assert import_logs([("h100.csv", text(H100_CSV))], topology=one).warnings == []
