"""Importing what people paste into tickets: plain `nvidia-smi -q` text and the default
`nvidia-smi` table, one moment or a loop.

Expected values from real files were read by eye from the file named in the test (see
tests/data/realdata/ATTRIBUTION.md for where each comes from). The -q text, the table and the
`--query-gpu` CSV of one capture were taken within the same second or two: the fields that do not
move between two reads (names, ids, totals, limits, maximum clocks and links, ECC and row-remap
counts and modes, MIG) must come out the same from each. Shapes no real sample shows (a lost GPU,
"[Unknown Error]" values, a brake in force, lifetime ECC errors) are small texts written here in
the shape nvidia-smi prints, each beside its -q -x twin.
"""

from __future__ import annotations

import calendar
import re
from pathlib import Path

import pytest

from gputop.commands.main import main as gputop_main
from gputop.importers.formats import import_logs, sniff
from gputop.importers.nvsmi_csv import parse_query_gpu_csv
from gputop.importers.nvsmi_table import parse_table
from gputop.importers.nvsmi_text import parse_q_text
from gputop.importers.nvsmi_values import NOT_IN_FILE
from gputop.importers.nvsmi_xml import parse_nvsmi_xml
from gputop.model import DeviceSample, Missing, Snapshot
from gputop.recording import read_recording

DATA = Path(__file__).resolve().parents[1] / "data" / "realdata"
Q, TABLE, CSV = DATA / "nvidia-smi-q-text", DATA / "nvidia-smi-table", DATA / "nvidia-smi-csv"
SHARED = Path("/work/shared/realdata")
H100_LOAD = "nvidia-h100-80gb-hbm3_x1_drv590.48.01_linux_load"
H100_MIG = "nvidia-h100-mig_x1_drv590.48.01_linux_load"
WINDOWS = "nvidia-geforce-rtx-2080-super_x1_drv591.86_windows_load"
DRIVER_610 = "nvidia-geforce-rtx-2080-super_x1_drv610.57.04_linux_load"
IDLE_2080 = "nvidia-geforce-rtx-2080-super_x1_drv595.71.05_linux_idle"
V100 = "tesla-v100-sxm2-16gb_x8_drv550_idle_thamada-gls"
GTX680 = "gtx-680_x1_drv470-kepler-legacy_thamada-gls"
A10 = "a10_x1_drv550_sw-power-cap-active_thamada-gls"
MiB = 2**20
NA = Missing("unsupported")
ABSENT = Missing("unsupported", detail=NOT_IN_FILE)


def q(stem: str) -> list[Snapshot]:
    return parse_q_text((Q / f"{stem}_q.txt").read_text(encoding="utf-8"))


def table(stem: str) -> list[Snapshot]:
    return parse_table((TABLE / f"{stem}_table.txt").read_text(encoding="utf-8"))


def utc(*fields: int) -> float:
    return float(calendar.timegm(fields))


# ----------------------------------------------------------------------------------------------
# nvidia-smi -q


def test_an_h100_under_load_lands_in_every_field_as_the_xml_importer_puts_it():
    (snap,) = q(H100_LOAD)
    (gpu,) = snap.devices
    assert snap.time == utc(2026, 7, 14, 8, 12, 53)
    assert (snap.system.driver_version, snap.system.cuda_version) == ("590.48.01", "13.1")
    assert (gpu.name, gpu.pci_bus_id) == ("NVIDIA H100 80GB HBM3", "00000000:00:09.0")
    assert gpu.uuid == "GPU-00000000-0000-0000-0000-000000000000"  # masked by the capture tool
    assert (gpu.util_gpu, gpu.util_mem, gpu.enc_util, gpu.dec_util) == (100.0, 11.0, 0.0, 0.0)
    assert (gpu.mem_total, gpu.mem_reserved, gpu.mem_used, gpu.mem_free) == (
        81559 * MiB, 479 * MiB, 19818 * MiB, 61263 * MiB)
    # v13 prints the average and the instant draw; the average is NVML's reading.
    assert (gpu.power_draw, gpu.power_limit, gpu.power_default_limit) == (629.45, 700.0, 700.0)
    assert (gpu.temp_gpu, gpu.temp_mem, gpu.temp_margin) == (59.0, 55.0, 26.0)
    assert gpu.temp_slowdown == Missing("unsupported", detail="only relative to T.Limit: -2 C")
    assert (gpu.clock_sm, gpu.clock_sm_max, gpu.clock_mem, gpu.clock_mem_max) == (
        1980, 1980, 2619, 2619)
    assert (gpu.pcie_gen, gpu.pcie_gen_max, gpu.pcie_width, gpu.pcie_width_max) == (5, 5, 16, 16)
    assert (gpu.pcie_tx, gpu.pcie_rx, gpu.pcie_replays) == (3092 * 1024, 6346 * 1024, 9)
    assert (gpu.pstate, gpu.fan, gpu.persistence_mode, gpu.mig_enabled) == (0, NA, True, False)
    assert gpu.throttle == ()
    assert gpu.throttle_time == dict.fromkeys(
        ("sw_power_cap", "sync_boost", "sw_thermal", "hw_thermal", "hw_power_brake"), 0.0)
    assert (gpu.ecc_enabled, gpu.ecc_corrected, gpu.ecc_uncorrected) == (True, 0, 0)
    assert (gpu.ecc_corrected_aggregate, gpu.ecc_uncorrected_aggregate) == (0, 0)
    assert (gpu.ecc_uncorrected_sram, gpu.ecc_uncorrected_dram) == (0, 0)
    assert gpu.ecc_sram_threshold_exceeded is False
    assert (gpu.remapped_corrected, gpu.remapped_uncorrected) == (0, 0)
    assert (gpu.remap_pending, gpu.remap_failed) == (False, False)
    assert (gpu.retired_single_bit, gpu.retire_pending) == (NA, NA)  # Hopper remaps rows
    assert gpu.lost is None and gpu.compute_capability == ABSENT
    assert [(p.pid, p.kind, p.name, p.gpu_mem) for p in snap.processes] == [
        (11327, "compute", "/root/tools/memhog", 2566 * MiB),
        (11328, "compute", "/root/tools/memhog", 1542 * MiB),
        (11345, "compute", "./gpu_burn", 15690 * MiB),
    ]
    assert snap.warnings == ()


def test_eight_v100s_with_ecc_by_location_and_retired_pages():
    (snap,) = q(V100)
    assert len(snap.devices) == 8
    assert [d.pci_bus_id[-7:] for d in snap.devices][:3] == ["00:04.0", "00:05.0", "00:06.0"]
    gpu = snap.devices[0]
    assert gpu.name == "Tesla V100-SXM2-16GB"
    assert (gpu.power_draw, gpu.power_limit) == (44.5, 300.0)
    # Single/double bit by location (before Ampere): device memory is the DRAM.
    assert (gpu.ecc_corrected, gpu.ecc_uncorrected, gpu.ecc_uncorrected_aggregate) == (0, 0, 0)
    assert (gpu.ecc_uncorrected_sram, gpu.ecc_uncorrected_dram_aggregate) == (0, 0)
    assert (gpu.retired_single_bit, gpu.retired_double_bit, gpu.retire_pending) == (0, 0, False)
    assert gpu.remap_pending == NA  # "Remapped Rows : N/A" before Ampere
    assert gpu.ecc_sram_threshold_exceeded == ABSENT


def test_a_kepler_on_a_legacy_driver_says_na_for_what_it_lacks():
    (snap,) = q(GTX680)
    (gpu,) = snap.devices
    assert (gpu.name, gpu.fan, gpu.temp_gpu, gpu.pstate) == ("NVIDIA GeForce GTX 680", 37.0,
                                                             35.0, 0)
    assert gpu.throttle == NA  # "Clocks Throttle Reasons : N/A"
    assert gpu.power_draw == NA and gpu.power_limit == NA  # the old "Power Readings" section
    assert gpu.util_gpu == NA and gpu.remap_failed == NA and gpu.ecc_enabled == NA
    assert gpu.mem_total == 2000 * MiB and gpu.mem_reserved == ABSENT


def test_sw_power_cap_active_at_p8_is_carried_as_printed():
    (gpu,) = q(A10)[0].devices
    assert gpu.throttle == ("sw_power_cap",) and gpu.pstate == 8


def test_driver_610_reads_kmd_version_and_the_ceiling_power_limit():
    (snap,) = q(DRIVER_610)
    (gpu,) = snap.devices
    assert snap.system.driver_version == "610.57.04"  # not "... [Deprecated; ...]"
    assert snap.system.cuda_version == "13.3"
    assert (gpu.power_draw, gpu.power_limit, gpu.power_default_limit) == (97.75, 250.0, 250.0)
    assert gpu.temp_margin == NA  # "GPU Current T.Limit Temp : N/A"


def test_windows_process_memory_is_unsupported_not_an_error():
    snap = q(WINDOWS)[0]
    assert len(snap.processes) == 12
    mem = {p.gpu_mem for p in snap.processes}
    assert mem == {Missing("unsupported", detail="Not available in WDDM driver model")}
    assert snap.processes[0].name == "C:\\Windows\\System32\\dwm.exe"


def test_a_mig_gpu_lists_its_instances_and_their_processes():
    (snap,) = q(H100_MIG)
    (gpu,) = snap.devices
    assert gpu.mig_enabled is True and gpu.util_gpu == NA
    assert [(m.gpu_instance, m.compute_instance, m.mem_used // MiB, m.mem_total // MiB)
            for m in gpu.mig_devices] == [(2, 0, 11091, 40448), (3, 0, 17, 20096),
                                          (9, 0, 9, 9984), (10, 0, 9, 9984)]
    assert {(p.gpu_instance, p.compute_instance) for p in snap.processes} == {(2, 0)}


def test_every_imported_moment_survives_the_recording_format():
    for path in sorted(Q.glob("*.txt")):
        for snap in parse_q_text(path.read_text(encoding="utf-8")):
            assert Snapshot.from_dict(snap.to_dict()) == snap, path.name


# ----------------------------------------------------------------------------------------------
# The same moment read three ways


# Fields that move between two reads a second apart. Everything else must agree exactly.
GAUGES = {"util_gpu", "util_mem", "enc_util", "dec_util", "temp_gpu", "temp_mem", "temp_margin",
          "power_draw", "clock_sm", "clock_mem", "fan", "pcie_rx", "pcie_tx", "pcie_replays",
          "throttle", "throttle_time", "mem_used", "mem_free", "pstate", "pcie_gen",
          "pcie_width"}


def _filled(v: object) -> bool:
    return not isinstance(v, Missing) and v != ""


def disagreements(a: DeviceSample, b: DeviceSample, *, fields: set[str]) -> dict[str, tuple]:
    """The fields of `fields` both samples have a value for, and the values where they differ."""
    out = {}
    for name in sorted(fields):
        va, vb = getattr(a, name), getattr(b, name)
        if _filled(va) and _filled(vb) and va != vb:
            out[name] = (va, vb)
    return out


STATIC = {*DeviceSample._measured, "name", "uuid", "pci_bus_id"} - GAUGES
PAIRS = [H100_LOAD, H100_MIG, WINDOWS, DRIVER_610]


@pytest.mark.parametrize("stem", PAIRS)
def test_the_q_text_and_the_csv_of_one_moment_agree_on_every_field_that_holds_still(stem: str):
    (from_q,) = q(stem)
    (from_csv,) = parse_query_gpu_csv((CSV / f"{stem}_query-gpu.csv").read_text("utf-8"))
    (a,), (b,) = from_q.devices, from_csv.devices
    compared = [n for n in STATIC if _filled(getattr(a, n)) and _filled(getattr(b, n))]
    assert len(compared) >= 10
    assert disagreements(a, b, fields=STATIC) == {}


def _shared_pairs() -> list[tuple[Path, Path]]:
    pairs = []
    for text in sorted((SHARED / "nvidia-smi-q-text").glob("nvidia-*_q.txt")):
        csv = SHARED / "nvidia-smi-csv" / text.name.replace("_q.txt", "_query-gpu.csv")
        if csv.exists():
            pairs.append((text, csv))
    return pairs


@pytest.mark.skipif(not SHARED.is_dir(), reason="the shared real-data folder is not here")
def test_every_shared_q_text_agrees_with_its_csv_on_the_fields_that_hold_still():
    pairs = _shared_pairs()
    assert len(pairs) >= 20
    compared = 0
    for text, csv in pairs:
        (a,) = parse_q_text(text.read_text("utf-8"))[0].devices
        (b,) = parse_query_gpu_csv(csv.read_text("utf-8"))[0].devices
        compared += sum(_filled(getattr(a, n)) and _filled(getattr(b, n)) for n in STATIC)
        assert disagreements(a, b, fields=STATIC) == {}, text.name
    assert compared >= 300


def _truncated_name(full: str, shown: str) -> bool:
    return shown == full or (shown.endswith("...") and full.startswith(shown[:-3]))


@pytest.mark.parametrize("stem", [H100_LOAD, H100_MIG, WINDOWS, DRIVER_610, IDLE_2080, V100,
                                  GTX680, A10])
def test_the_table_agrees_with_the_q_text_taken_with_it(stem: str):
    from_q, from_table = q(stem)[0], table(stem)[0]
    assert len(from_q.devices) == len(from_table.devices)
    for a, b in zip(from_q.devices, from_table.devices):
        assert _truncated_name(a.name, b.name)
        assert disagreements(a, b, fields=STATIC - {"name"}) == {}
        assert b.mem_total == a.mem_total and b.power_limit == a.power_limit
    assert ([(p.pid, p.device_index, p.kind, p.gpu_instance) for p in from_table.processes]
            == [(p.pid, p.device_index, p.kind, p.gpu_instance) for p in from_q.processes])


def test_the_table_of_one_moment_gives_the_q_texts_gauges_to_its_precision():
    from_q, from_table = q(H100_LOAD)[0], table(H100_LOAD)[0]
    (a,), (b,) = from_q.devices, from_table.devices
    assert from_table.time == from_q.time
    assert (b.util_gpu, b.temp_gpu, b.pstate, b.mem_used) == (a.util_gpu, a.temp_gpu, a.pstate,
                                                              a.mem_used)
    assert b.power_draw == 629.0 and abs(a.power_draw - b.power_draw) < 1  # whole watts
    assert [p.gpu_mem for p in from_table.processes] == [p.gpu_mem for p in from_q.processes]


# A moment no real sample shows, printed both ways: HW power brake in force at 345 MHz, lifetime
# uncorrectable ECC, a new volatile SRAM error, a row remap pending, a page retirement pending.
TROUBLED_Q = """\
==============NVSMI LOG==============

Timestamp                                 : Mon Mar  3 10:00:00 2025
Driver Version                            : 550.54.15
CUDA Version                              : 12.4

Attached GPUs                             : 1
GPU 00000000:3B:00.0
    Product Name                          : NVIDIA A100-SXM4-80GB
    GPU UUID                              : GPU-0f0e0d0c-0b0a-0908-0706-050403020100
    Persistence Mode                      : Enabled
    PCI
        Bus Id                            : 00000000:3B:00.0
        GPU Link Info
            PCIe Generation
                Max                       : 4
                Current                   : 2
            Link Width
                Max                       : 16x
                Current                   : 8x
        Replays Since Reset               : 3
        Tx Throughput                     : 1000 KB/s
        Rx Throughput                     : 2000 KB/s
    Performance State                     : P0
    Clocks Event Reasons
        Idle                              : Not Active
        Applications Clocks Setting       : Not Active
        SW Power Cap                      : Not Active
        HW Slowdown                       : Active
            HW Thermal Slowdown           : Not Active
            HW Power Brake Slowdown       : Active
        Sync Boost                        : Not Active
        SW Thermal Slowdown               : Not Active
        Display Clock Setting             : Not Active
    FB Memory Usage
        Total                             : 81920 MiB
        Reserved                          : 512 MiB
        Used                              : 40000 MiB
        Free                              : 41408 MiB
    Utilization
        Gpu                               : 97 %
        Memory                            : 40 %
    ECC Mode
        Current                           : Enabled
        Pending                           : Enabled
    ECC Errors
        Volatile
            SRAM Correctable              : 0
            SRAM Uncorrectable            : 1
            DRAM Correctable              : 4
            DRAM Uncorrectable            : 0
        Aggregate
            SRAM Correctable              : 2
            SRAM Uncorrectable            : 1
            DRAM Correctable              : 17
            DRAM Uncorrectable            : 2
    Retired Pages
        Single Bit ECC                    : 1
        Double Bit ECC                    : 2
        Pending Page Blacklist            : Yes
    Remapped Rows
        Correctable Error                 : 0
        Uncorrectable Error               : 2
        Pending                           : Yes
        Remapping Failure Occurred        : No
    Temperature
        GPU Current Temp                  : 71 C
        GPU Shutdown Temp                 : 92 C
        GPU Slowdown Temp                 : 89 C
        GPU Max Operating Temp            : 85 C
        Memory Current Temp               : 80 C
    GPU Power Readings
        Power Draw                        : [Unknown Error]
        Current Power Limit               : 400.00 W
        Default Power Limit               : 400.00 W
    Clocks
        Graphics                          : 345 MHz
        SM                                : 345 MHz
        Memory                            : 1593 MHz
    Max Clocks
        Graphics                          : 1410 MHz
        SM                                : 1410 MHz
        Memory                            : 1593 MHz
    Processes
        GPU instance ID                   : N/A
        Compute instance ID               : N/A
        Process ID                        : 4242
            Type                          : C
            Name                          : python train.py
            Used GPU Memory               : 39000 MiB
"""

TROUBLED_XML = """<?xml version="1.0" ?>
<nvidia_smi_log>
  <timestamp>Mon Mar  3 10:00:00 2025</timestamp>
  <driver_version>550.54.15</driver_version>
  <cuda_version>12.4</cuda_version>
  <attached_gpus>1</attached_gpus>
  <gpu id="00000000:3B:00.0">
    <product_name>NVIDIA A100-SXM4-80GB</product_name>
    <uuid>GPU-0f0e0d0c-0b0a-0908-0706-050403020100</uuid>
    <persistence_mode>Enabled</persistence_mode>
    <pci>
      <pci_bus_id>00000000:3B:00.0</pci_bus_id>
      <pci_gpu_link_info>
        <pcie_gen><max_link_gen>4</max_link_gen><current_link_gen>2</current_link_gen></pcie_gen>
        <link_widths><max_link_width>16x</max_link_width>
          <current_link_width>8x</current_link_width></link_widths>
      </pci_gpu_link_info>
      <replay_counter>3</replay_counter>
      <tx_util>1000 KB/s</tx_util>
      <rx_util>2000 KB/s</rx_util>
    </pci>
    <performance_state>P0</performance_state>
    <clocks_event_reasons>
      <clocks_event_reason_gpu_idle>Not Active</clocks_event_reason_gpu_idle>
      <clocks_event_reason_applications_clocks_setting>Not Active
        </clocks_event_reason_applications_clocks_setting>
      <clocks_event_reason_sw_power_cap>Not Active</clocks_event_reason_sw_power_cap>
      <clocks_event_reason_hw_slowdown>Active</clocks_event_reason_hw_slowdown>
      <clocks_event_reason_hw_thermal_slowdown>Not Active</clocks_event_reason_hw_thermal_slowdown>
      <clocks_event_reason_hw_power_brake_slowdown>Active</clocks_event_reason_hw_power_brake_slowdown>
      <clocks_event_reason_sync_boost>Not Active</clocks_event_reason_sync_boost>
      <clocks_event_reason_sw_thermal_slowdown>Not Active</clocks_event_reason_sw_thermal_slowdown>
      <clocks_event_reason_display_clocks_setting>Not Active
        </clocks_event_reason_display_clocks_setting>
    </clocks_event_reasons>
    <fb_memory_usage><total>81920 MiB</total><reserved>512 MiB</reserved>
      <used>40000 MiB</used><free>41408 MiB</free></fb_memory_usage>
    <utilization><gpu_util>97 %</gpu_util><memory_util>40 %</memory_util></utilization>
    <ecc_mode><current_ecc>Enabled</current_ecc><pending_ecc>Enabled</pending_ecc></ecc_mode>
    <ecc_errors>
      <volatile><sram_correctable>0</sram_correctable><sram_uncorrectable>1</sram_uncorrectable>
        <dram_correctable>4</dram_correctable><dram_uncorrectable>0</dram_uncorrectable></volatile>
      <aggregate><sram_correctable>2</sram_correctable><sram_uncorrectable>1</sram_uncorrectable>
        <dram_correctable>17</dram_correctable><dram_uncorrectable>2</dram_uncorrectable></aggregate>
    </ecc_errors>
    <retired_pages>
      <multiple_single_bit_retirement><retired_count>1</retired_count></multiple_single_bit_retirement>
      <double_bit_retirement><retired_count>2</retired_count></double_bit_retirement>
      <pending_blacklist>Yes</pending_blacklist>
    </retired_pages>
    <remapped_rows>
      <remapped_row_corr>0</remapped_row_corr>
      <remapped_row_unc>2</remapped_row_unc>
      <remapped_row_pending>Yes</remapped_row_pending>
      <remapped_row_failure>No</remapped_row_failure>
    </remapped_rows>
    <temperature>
      <gpu_temp>71 C</gpu_temp>
      <gpu_temp_max_threshold>92 C</gpu_temp_max_threshold>
      <gpu_temp_slow_threshold>89 C</gpu_temp_slow_threshold>
      <gpu_temp_max_gpu_threshold>85 C</gpu_temp_max_gpu_threshold>
      <memory_temp>80 C</memory_temp>
    </temperature>
    <gpu_power_readings>
      <power_draw>[Unknown Error]</power_draw>
      <current_power_limit>400.00 W</current_power_limit>
      <default_power_limit>400.00 W</default_power_limit>
    </gpu_power_readings>
    <clocks><graphics_clock>345 MHz</graphics_clock><sm_clock>345 MHz</sm_clock>
      <mem_clock>1593 MHz</mem_clock></clocks>
    <max_clocks><graphics_clock>1410 MHz</graphics_clock><sm_clock>1410 MHz</sm_clock>
      <mem_clock>1593 MHz</mem_clock></max_clocks>
    <processes>
      <process_info>
        <gpu_instance_id>N/A</gpu_instance_id>
        <compute_instance_id>N/A</compute_instance_id>
        <pid>4242</pid>
        <type>C</type>
        <process_name>python train.py</process_name>
        <used_memory>39000 MiB</used_memory>
      </process_info>
    </processes>
  </gpu>
</nvidia_smi_log>
"""


def test_a_troubled_moment_reads_the_same_from_the_q_text_and_its_xml_twin():
    (from_q,) = parse_q_text(TROUBLED_Q)
    assert from_q == parse_nvsmi_xml(TROUBLED_XML)
    gpu = from_q.devices[0]
    # What a single-moment verdict reads, each from this one tick:
    assert gpu.throttle == ("hw_slowdown", "hw_power_brake")
    assert (gpu.clock_sm, gpu.clock_sm_max) == (345, 1410)
    assert (gpu.pcie_gen, gpu.pcie_gen_max, gpu.pcie_width, gpu.pcie_width_max) == (2, 4, 8, 16)
    assert (gpu.ecc_corrected, gpu.ecc_uncorrected) == (4, 1)
    assert (gpu.ecc_uncorrected_sram, gpu.ecc_uncorrected_dram) == (1, 0)
    assert (gpu.ecc_corrected_aggregate, gpu.ecc_uncorrected_aggregate) == (19, 3)
    assert (gpu.ecc_uncorrected_sram_aggregate, gpu.ecc_uncorrected_dram_aggregate) == (1, 2)
    assert (gpu.retired_single_bit, gpu.retired_double_bit, gpu.retire_pending) == (1, 2, True)
    assert (gpu.remapped_uncorrected, gpu.remap_pending, gpu.remap_failed) == (2, True, False)
    assert gpu.power_draw == Missing("error", detail="Unknown Error")
    assert (gpu.power_limit, gpu.temp_slowdown, gpu.temp_max_operating) == (400.0, 89.0, 85.0)
    assert gpu.lost is None
    assert from_q.processes[0].name == "python train.py"


def test_a_gpu_that_fell_off_the_bus_while_nvidia_smi_read_it_is_lost_in_both():
    lost_q = TROUBLED_Q.replace("71 C", "[GPU is lost]")
    lost_xml = TROUBLED_XML.replace("71 C", "[GPU is lost]")
    (gpu,) = parse_q_text(lost_q)[0].devices
    assert gpu.lost == Missing("gpu_lost") and gpu.temp_gpu == Missing("gpu_lost")
    assert parse_nvsmi_xml(lost_xml).devices[0] == gpu


def test_a_gpu_nvidia_smi_cannot_open_is_lost_in_bus_order_among_the_others():
    text = ("Unable to determine the device handle for GPU 0000:1B:00.0: GPU is lost.  Reboot "
            "the system to recover this GPU\n" + TROUBLED_Q)
    snap = parse_q_text(text)[0]
    assert [(d.index, d.pci_bus_id, d.lost is not None) for d in snap.devices] == [
        (0, "00000000:1B:00.0", True), (1, "00000000:3B:00.0", False)]
    lost = snap.devices[0]
    assert lost.lost == Missing("gpu_lost", detail="GPU is lost.  Reboot the system to recover "
                                                   "this GPU")
    assert lost.util_gpu == lost.lost and lost.name == ""
    assert [p.device_index for p in snap.processes] == [1]
    # All that nvidia-smi printed: one line, one lost GPU.
    (only,) = parse_q_text("Unable to determine the device handle for GPU0000:65:00.0: Unknown "
                           "Error\n")[0].devices
    assert only.pci_bus_id == "00000000:65:00.0"
    assert only.lost == Missing("gpu_lost", detail="Unknown Error")


# ----------------------------------------------------------------------------------------------
# Loops, pastes, fragments


def test_a_q_loop_is_one_snapshot_per_moment_with_and_without_its_banners():
    first = (Q / f"{IDLE_2080}_q.txt").read_text("utf-8")
    second = TROUBLED_Q.replace("10:00:00", "10:00:05")
    loop = first + "\n" + second
    snaps = parse_q_text(loop)
    assert [s.time for s in snaps] == [utc(2026, 6, 24, 10, 26, 34),
                                       utc(2025, 3, 3, 10, 0, 5)]
    assert [s.devices[0].name for s in snaps] == ["NVIDIA GeForce RTX 2080 SUPER",
                                                  "NVIDIA A100-SXM4-80GB"]
    bannerless = re.sub(r"=+NVSMI LOG=+\n", "", loop)
    assert parse_q_text(bannerless) == snaps


def test_a_paste_with_prompts_and_a_section_cut_out_of_q_reads_what_it_has():
    fragment = """\
$ nvidia-smi -q -d PERFORMANCE -i 0
    Performance State                 : P0
    Clocks Event Reasons
        Idle                          : Not Active
        SW Power Cap                  : Not Active
        HW Slowdown                   : Active
            HW Thermal Slowdown       : Not Active
            HW Power Brake Slowdown   : Active
        SW Thermal Slowdown           : Not Active
    Clocks Event Reasons Counters
        SW Power Capping              : 33921903067 us
        HW Power Braking              : 1200000 us
"""
    assert sniff(fragment) == "q"
    (snap,) = parse_q_text(fragment, start=1000.0, interval=2.0)
    (gpu,) = snap.devices
    assert gpu.throttle == ("hw_slowdown", "hw_power_brake") and gpu.pstate == 0
    assert gpu.throttle_time == {"sw_power_cap": 33921.903067, "hw_power_brake": 1.2}
    assert gpu.mem_total == ABSENT and gpu.name == ""
    assert snap.time == 1000.0
    assert snap.warnings[0].startswith("the text has no readable Timestamp line: moments are "
                                       "taken 2 s")


def test_a_cut_off_q_text_reads_up_to_where_it_ends():
    text = (Q / f"{H100_LOAD}_q.txt").read_text("utf-8")
    cut = text[: text.index("    ECC Errors")]
    (gpu,) = parse_q_text(cut)[0].devices
    assert gpu.util_gpu == 100.0 and gpu.ecc_enabled is True
    assert gpu.ecc_uncorrected == ABSENT and gpu.power_draw == ABSENT


@pytest.mark.parametrize("text", ["", "hello\nworld\n", "==============NVSMI LOG==============\n"
                                  "Timestamp : Mon Mar  3 10:00:00 2025\n",
                                  "<nvidia_smi_log>", "a : b\n    c : d\n"])
def test_text_without_a_gpu_is_a_one_line_value_error(text: str):
    with pytest.raises(ValueError) as e:
        parse_q_text(text)
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError) as e:
        parse_table(text)
    assert "\n" not in str(e.value)


# ----------------------------------------------------------------------------------------------
# The default table


def test_an_h100_table_under_load():
    (snap,) = table(H100_LOAD)
    (gpu,) = snap.devices
    assert snap.time == utc(2026, 7, 14, 8, 12, 53)
    assert (snap.system.driver_version, snap.system.cuda_version) == ("590.48.01", "13.1")
    assert (gpu.index, gpu.name, gpu.pci_bus_id) == (0, "NVIDIA H100 80GB HBM3",
                                                     "00000000:00:09.0")
    assert (gpu.persistence_mode, gpu.fan, gpu.temp_gpu, gpu.pstate) == (True, NA, 59.0, 0)
    assert (gpu.power_draw, gpu.power_limit) == (629.0, 700.0)
    assert (gpu.mem_used, gpu.mem_total, gpu.util_gpu) == (19818 * MiB, 81559 * MiB, 100.0)
    assert (gpu.ecc_enabled, gpu.ecc_uncorrected, gpu.mig_enabled) == (True, 0, False)
    assert gpu.clock_sm == ABSENT and gpu.throttle == ABSENT  # not in the table
    assert [(p.pid, p.kind, p.name, p.gpu_mem) for p in snap.processes] == [
        (11327, "compute", "/root/tools/memhog", 2566 * MiB),
        (11328, "compute", "/root/tools/memhog", 1542 * MiB),
        (11345, "compute", "./gpu_burn", 15690 * MiB),
    ]
    assert snap.warnings == ()


def test_a_mig_table_lists_the_mig_devices_and_ecc_on():
    (gpu,) = table(H100_MIG)[0].devices
    assert gpu.ecc_enabled is True and gpu.ecc_uncorrected == ABSENT  # the column says "On"
    assert gpu.util_gpu == NA and gpu.mig_enabled is True
    assert [(m.gpu_instance, m.compute_instance, m.mem_used // MiB) for m in gpu.mig_devices] == [
        (2, 0, 11091), (3, 0, 17), (9, 0, 9), (10, 0, 9)]


def test_an_old_table_layout_with_a_cut_name():
    (snap,) = table(GTX680)
    (gpu,) = snap.devices
    assert (gpu.name, gpu.fan, gpu.power_draw, gpu.power_limit) == ("NVIDIA GeForce ...", 37.0,
                                                                    NA, NA)
    assert snap.processes == ()
    assert "no date line" in snap.warnings[0]


def test_a_table_loop_and_a_table_with_errors_and_a_lost_gpu():
    first = (TABLE / f"{H100_LOAD}_table.txt").read_text("utf-8")
    second = (first.replace("08:12:53", "08:12:58").replace("629W", "ERR!")
              .replace("|   0  NVIDIA", "|   1  NVIDIA"))
    second = ("Unable to determine the device handle for GPU 0000:00:04.0: Unknown Error\n"
              + second)
    snaps = parse_table(first + "\n" + second)
    assert [s.time for s in snaps] == [utc(2026, 7, 14, 8, 12, 53), utc(2026, 7, 14, 8, 12, 58)]
    lost, gpu = snaps[1].devices
    assert (lost.pci_bus_id, lost.lost) == ("00000000:00:04.0",
                                            Missing("gpu_lost", detail="Unknown Error"))
    assert gpu.power_draw == Missing("error", detail="ERR!")
    # The processes name the GPU by its printed index, which is not there: said, not guessed.
    assert any("GPU 0, which the table does not list" in w for w in snaps[1].warnings)


# ----------------------------------------------------------------------------------------------
# Through the import command


@pytest.mark.parametrize(("path", "kind"), [
    (Q / f"{H100_LOAD}_q.txt", "q"), (Q / f"{GTX680}_q.txt", "q"),
    (TABLE / f"{H100_LOAD}_table.txt", "table"), (TABLE / f"{GTX680}_table.txt", "table"),
])
def test_the_kind_is_told_from_the_content(path: Path, kind: str):
    assert sniff(path.read_text("utf-8")) == kind


def test_a_pasted_q_text_and_table_become_recordings(tmp_path, capsys):
    out = tmp_path / "q.gputop"
    assert gputop_main(["import", "-o", str(out), str(Q / f"{V100}_q.txt")]) == 0
    snaps = read_recording(out).snapshots
    assert len(snaps) == 1 and len(snaps[0].devices) == 8
    assert "1 snapshots (q)" in capsys.readouterr().err
    out = tmp_path / "t.gputop"
    assert gputop_main(["import", "-o", str(out), "--start", "2024-11-18T12:16:13",
                        str(TABLE / f"{V100}_table.txt")]) == 0
    (snap,) = read_recording(out).snapshots
    assert snap.time == utc(2024, 11, 18, 12, 16, 13)
    assert "(set the spacing with --interval)" in capsys.readouterr().err  # --start was given


def test_a_damaged_paste_through_the_command_is_one_line_and_rc_1(tmp_path, capsys):
    bad = tmp_path / "ticket.txt"
    bad.write_text("==============NVSMI LOG==============\n\nTimestamp : Mon Mar  3\n")
    assert gputop_main(["import", "-o", str(tmp_path / "x.gputop"), str(bad)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ticket.txt: no GPU in the text" in err
    assert "Traceback" not in err


def test_q_text_and_xml_are_not_mixed_in_one_import():
    text = TROUBLED_Q
    with pytest.raises(Exception, match="mix"):
        import_logs([("a.txt", text), ("b.xml", TROUBLED_XML)])


def test_the_old_throttle_reason_names_read_as_the_new_ones():
    text = """\
GPU 00000000:3B:00.0
    Product Name                          : Tesla V100-SXM2-32GB
    Performance State                     : P0
    Clocks Throttle Reasons
        Idle                              : Not Active
        Applications Clocks Setting       : Not Active
        SW Power Cap                      : Not Active
        HW Slowdown                       : Not Active
            HW Thermal Slowdown           : Not Active
            HW Power Brake Slowdown       : Not Active
        Sync Boost                        : Not Active
        SW Thermal Slowdown               : Active
        Display Clock Setting             : Not Active
    Retired Pages
        Single Bit ECC                    : 0
        Double Bit ECC                    : 1
        Pending                           : Yes
"""
    (gpu,) = parse_q_text(text)[0].devices
    assert gpu.throttle == ("sw_thermal",)
    assert (gpu.retired_double_bit, gpu.retire_pending) == (1, True)
    assert gpu.pci_bus_id == "00000000:3B:00.0"


def test_a_table_pasted_after_its_command_is_told_and_read():
    text = "$ nvidia-smi\n" + (TABLE / f"{H100_LOAD}_table.txt").read_text("utf-8") + "$ \n"
    assert sniff(text) == "table"
    assert len(parse_table(text)[0].processes) == 3


@pytest.mark.parametrize("parse, path", [
    (parse_q_text, Q / f"{H100_MIG}_q.txt"), (parse_q_text, Q / f"{V100}_q.txt"),
    (parse_table, TABLE / f"{H100_MIG}_table.txt"), (parse_table, TABLE / f"{WINDOWS}_table.txt"),
])
def test_cut_shuffled_or_garbled_pastes_give_snapshots_or_a_value_error(parse, path: Path):
    import random

    rng = random.Random(7)
    lines = path.read_text("utf-8").splitlines(keepends=True)
    for _ in range(60):
        mutated = list(lines)
        how = rng.randrange(4)
        if how == 0:  # cut off anywhere
            mutated = mutated[: rng.randrange(len(mutated))]
        elif how == 1:  # lines lost
            for _ in range(rng.randrange(1, 20)):
                mutated.pop(rng.randrange(len(mutated)))
        elif how == 2:  # re-indented or moved
            for _ in range(rng.randrange(1, 10)):
                i, j = rng.randrange(len(mutated)), rng.randrange(len(mutated))
                mutated[i], mutated[j] = " " * rng.randrange(12) + mutated[j].lstrip(), mutated[i]
        else:  # bytes garbled
            text = "".join(mutated)
            for _ in range(rng.randrange(1, 30)):
                k = rng.randrange(len(text))
                text = text[:k] + chr(rng.randrange(32, 0x2FF)) + text[k + 1:]
            mutated = [text]
        try:
            snaps = parse("".join(mutated))
        except ValueError as e:
            assert "\n" not in str(e)
        else:
            for snap in snaps:
                assert Snapshot.from_dict(snap.to_dict()) == snap


def test_a_garbled_process_is_left_out_and_said_the_rest_is_read():
    text = TROUBLED_Q.replace("Process ID                        : 4242",
                              "Process ID                        : 42x2")
    (snap,) = parse_q_text(text)
    assert snap.processes == () and snap.devices[0].remap_pending is True
    assert snap.warnings == ("line 87 skipped: unreadable process id '42x2'",)
    table_text = (TABLE / f"{H100_LOAD}_table.txt").read_text("utf-8").replace("11328", "1l328")
    (snap,) = parse_table(table_text)
    assert [p.pid for p in snap.processes] == [11327, 11345]
    assert any("a process row cannot be read" in w for w in snap.warnings)
