"""Importing real `nvidia-smi -q -x` and `nvidia-smi topo -m` outputs.

Every expected value below was read by eye from the sample file named in the test (see
tests/data/realdata/ATTRIBUTION.md for where each file comes from).
"""

from __future__ import annotations

import calendar
from pathlib import Path

import pytest

from gputop.importers.nvsmi_topo import parse_topo_matrix
from gputop.importers.nvsmi_xml import NOT_IN_FILE, parse_nvsmi_xml
from gputop.model import Missing, Snapshot, Topology

DATA = Path(__file__).resolve().parents[1] / "data" / "realdata"
XML = DATA / "nvidia-smi-xml"
TOPO = DATA / "nvidia-smi-topo"
MiB = 2**20
ABSENT = Missing("unsupported", detail=NOT_IN_FILE)
NA = Missing("unsupported")


def load(name: str) -> Snapshot:
    return parse_nvsmi_xml((XML / name).read_text(encoding="utf-8"))


def topo(name: str) -> Topology:
    return parse_topo_matrix((TOPO / name).read_text(encoding="utf-8"))


def utc(*fields: int) -> float:
    return float(calendar.timegm(fields))


# ----------------------------------------------------------------------------------------------
# nvidia-smi -q -x


def test_a100_with_mig_shows_its_four_instances_and_no_device_utilization():
    snap = load("a100-sxm4-80gb_attached4-but-1-gpu-element_mig-enabled_drv535_telegraf.xml")
    (gpu,) = snap.devices
    assert (gpu.index, gpu.vendor, gpu.name) == (0, "nvidia", "NVIDIA A100-SXM4-80GB")
    assert gpu.uuid == "GPU-513536b6-7d19-9063-b049-1e69664bb298"
    assert gpu.pci_bus_id == "00000000:01:00.0"
    assert gpu.mig_enabled is True
    assert [(m.gpu_instance, m.compute_instance) for m in gpu.mig_devices] == [
        (3, 0), (4, 0), (5, 0), (6, 0)
    ]
    for mig in gpu.mig_devices:
        assert (mig.mem_total, mig.mem_used) == (19968 * MiB, 12 * MiB)
        assert mig.uuid == ABSENT  # the XML has no per-instance UUID
    # NVML gives no device utilization with MIG on; nvidia-smi prints N/A.
    assert gpu.util_gpu == NA and gpu.util_mem == NA
    assert gpu.mem_total == 81920 * MiB
    assert (gpu.mem_used, gpu.mem_reserved, gpu.mem_free) == (50 * MiB, 869 * MiB, 80999 * MiB)
    assert (gpu.power_draw, gpu.power_limit, gpu.power_default_limit) == (67.03, 500.0, 500.0)
    assert (gpu.temp_gpu, gpu.temp_mem) == (27.0, 44.0)
    assert (gpu.temp_slowdown, gpu.temp_shutdown, gpu.temp_max_operating) == (89.0, 92.0, 85.0)
    assert gpu.temp_margin == NA  # gpu_temp_tlimit N/A on this driver
    assert (gpu.clock_sm, gpu.clock_sm_max, gpu.clock_mem, gpu.clock_mem_max) == (
        1275, 1410, 1593, 1593
    )
    assert gpu.pstate == 0
    assert gpu.throttle == ()
    assert gpu.pcie_tx == 4000 * 1024 and gpu.pcie_rx == 0.0
    assert (gpu.ecc_enabled, gpu.ecc_corrected, gpu.ecc_uncorrected) == (True, 0, 0)
    assert gpu.remapped_corrected == NA and gpu.remap_pending == NA
    assert gpu.fan == NA
    assert snap.processes == ()
    assert snap.system.driver_version == "535.54.03"
    assert snap.system.cuda_version == "12.2"
    assert snap.system.hostname == ""
    assert snap.time == utc(2023, 8, 4, 11, 44, 30)
    # The file says 4 GPUs are attached but keeps one <gpu> element.
    assert any("4 GPUs" in w and "lists 1" in w for w in snap.warnings)


def test_a10g_idle_with_xorg_and_old_throttle_tag_names():
    snap = load("a10g_x1_drv515_telegraf.xml")
    (gpu,) = snap.devices
    assert gpu.name == "NVIDIA A10G"
    assert gpu.throttle == ("gpu_idle",)
    assert gpu.pstate == 8
    assert (gpu.power_draw, gpu.power_limit, gpu.power_default_limit) == (25.58, 300.0, 300.0)
    assert gpu.mem_total == 23028 * MiB and gpu.mem_used == 22 * MiB
    assert gpu.temp_gpu == 17.0 and gpu.temp_mem == NA
    assert (gpu.pcie_gen, gpu.pcie_gen_max, gpu.pcie_width, gpu.pcie_width_max) == (1, 4, 8, 16)
    assert (gpu.remapped_corrected, gpu.remapped_uncorrected) == (0, 0)
    assert (gpu.remap_pending, gpu.remap_failed) == (False, False)
    assert gpu.mig_enabled == NA and gpu.mig_devices == ()
    (proc,) = snap.processes
    assert (proc.pid, proc.device_index, proc.kind) == (725, 0, "graphics")
    assert proc.gpu_mem == 22 * MiB
    assert proc.name == "/usr/lib/xorg/Xorg"
    assert proc.gpu_instance is None and proc.compute_instance is None
    assert proc.user == ABSENT and proc.sm_util == ABSENT
    assert snap.warnings == ()


def test_gtx_1660_ti_keeps_the_name_graphics_device_as_printed():
    snap = load("gtx-1660-ti_x1_graphics-device-name_drv418_telegraf.xml")
    (gpu,) = snap.devices
    assert gpu.name == "Graphics Device"
    assert gpu.mem_total == 5912 * MiB and gpu.mem_used == 0
    assert gpu.mem_reserved == ABSENT  # driver 418 prints no <reserved>
    assert (gpu.power_draw, gpu.power_limit) == (8.93, 130.0)
    assert (gpu.temp_gpu, gpu.temp_slowdown, gpu.temp_shutdown, gpu.temp_max_operating) == (
        40.0, 93.0, 96.0, 91.0
    )
    assert gpu.clock_sm_max == 2145 and gpu.clock_mem_max == 4001
    assert gpu.util_mem == 1.0
    assert gpu.ecc_enabled == NA and gpu.ecc_corrected == NA
    assert snap.system.driver_version == "418.43" and snap.system.cuda_version == "10.1"


def test_quadro_p400_without_a_power_sensor():
    (gpu,) = load("quadro-p400_x1_drv418_telegraf.xml").devices
    assert gpu.name == "Quadro P400"
    assert gpu.power_draw == NA
    assert gpu.power_limit == NA and gpu.power_default_limit == NA
    assert gpu.mem_total == 1998 * MiB
    assert (gpu.temp_gpu, gpu.temp_slowdown, gpu.temp_shutdown) == (33.0, 100.0, 103.0)
    assert gpu.temp_max_operating == NA
    assert gpu.fan == 34.0
    assert gpu.throttle == ("gpu_idle",)
    # Old ECC layout (single_bit/double_bit totals), all N/A on this card.
    assert gpu.ecc_corrected == NA and gpu.ecc_uncorrected == NA


def test_rtx_3060_reads_the_new_clocks_event_reason_tags_and_average_power():
    (gpu,) = load("rtx-3060_x1_drv570_clocks-event-reasons_telegraf.xml").devices
    assert gpu.name == "NVIDIA GeForce RTX 3060"
    assert gpu.throttle == ("gpu_idle",)
    assert gpu.power_draw == 11.60  # average_power_draw; instant_power_draw is 11.63
    assert gpu.power_limit == 170.0
    assert gpu.persistence_mode is True
    assert (gpu.mem_total, gpu.mem_used, gpu.mem_reserved, gpu.mem_free) == (
        12288 * MiB, 116 * MiB, 368 * MiB, 11806 * MiB
    )
    assert (gpu.pcie_rx, gpu.pcie_tx) == (500 * 1024, 550 * 1024)
    assert gpu.throttle_time == ABSENT  # counters arrived with schema v13


def test_rtx_3080_on_windows_has_no_persistence_mode_and_a_raised_power_limit():
    snap = load("rtx-3080_x1_drv536-windows_telegraf.xml")
    (gpu,) = snap.devices
    assert gpu.persistence_mode == NA  # WDDM
    assert (gpu.power_draw, gpu.power_limit, gpu.power_default_limit) == (22.78, 336.0, 320.0)
    assert gpu.util_mem == 37.0
    assert [(p.pid, p.kind, p.gpu_mem) for p in snap.processes] == [
        (835, "graphics", 550 * MiB),
        (1481, "graphics", 18 * MiB),
        (2214, "graphics", 79 * MiB),
        (4044, "graphics", 541 * MiB),
        (42416, "graphics", 159 * MiB),
    ]
    assert snap.processes[1].name == "/usr/bin/gnome-shell"


def test_rtx_3080_v13_under_load():
    snap = load("rtx-3080_x1_drv595_schema-v13_telegraf.xml")
    (gpu,) = snap.devices
    assert (gpu.util_gpu, gpu.util_mem) == (65.0, 9.0)
    assert gpu.power_draw == 139.62  # average, not the instant 142.33
    assert gpu.power_limit == 320.0
    assert gpu.pstate == 2
    assert (gpu.clock_sm, gpu.clock_sm_max, gpu.clock_mem) == (1950, 2100, 9251)
    assert gpu.mem_used == 9184 * MiB and gpu.mem_free == 660 * MiB
    assert gpu.throttle == ()
    assert gpu.throttle_time == {
        "sw_power_cap": 0.0, "sync_boost": 0.0, "sw_thermal": 0.0, "hw_thermal": 0.0,
        "hw_power_brake": 0.0,
    }
    assert gpu.pcie_rx == 14742333 * 1024 and gpu.pcie_tx == 1066699 * 1024
    assert snap.system.cuda_version == "13.2"
    assert snap.processes == ()


def test_rtx_4000_sff_ada_processes_and_t_limit_temperatures():
    snap = load("rtx-4000-sff-ada_x1_drv595_schema-v13_telegraf.xml")
    (gpu,) = snap.devices
    assert gpu.name == "NVIDIA RTX 4000 SFF Ada Generation"
    assert [(p.pid, p.kind, p.gpu_mem, p.name) for p in snap.processes] == [
        (1842, "graphics", 410 * MiB, "cosmic-comp"),
        (3190, "graphics", 451 * MiB, "/usr/bin/code"),
        (4937, "compute", 160 * MiB, "python"),
        (34626, "compute+graphics", 183 * MiB, "/usr/lib/chromium/chromium"),
    ]
    assert gpu.temp_gpu == 38.0
    assert gpu.temp_margin == 49.0  # "GPU T.Limit Temp"
    # Only T.Limit-relative thresholds are printed; the raw text is kept in the detail.
    assert gpu.temp_slowdown == Missing("unsupported", detail="only relative to T.Limit: -2 C")
    assert gpu.temp_shutdown == Missing("unsupported", detail="only relative to T.Limit: -7 C")
    assert gpu.temp_max_operating == Missing("unsupported", detail="only relative to T.Limit: 0 C")
    assert gpu.throttle == ("gpu_idle",)
    assert gpu.throttle_time["sw_power_cap"] == pytest.approx(4251.825415)
    assert gpu.ecc_enabled is False
    assert gpu.ecc_corrected == Missing("unsupported", detail="ECC is off")
    assert (gpu.remapped_corrected, gpu.remap_failed) == (0, False)
    assert (gpu.fan, gpu.power_draw, gpu.power_limit) == (30.0, 8.81, 70.0)
    assert snap.system.driver_version == "595.84"


def test_tesla_t4_with_a_python_process():
    snap = load("tesla-t4_x1_drv515_telegraf.xml")
    (gpu,) = snap.devices
    assert gpu.name == "Tesla T4"
    assert gpu.pstate == 0 and gpu.throttle == ()
    assert gpu.fan == NA
    assert (gpu.power_draw, gpu.power_limit) == (26.78, 70.0)
    assert (gpu.mem_total, gpu.mem_used) == (15360 * MiB, 1032 * MiB)
    assert (gpu.ecc_enabled, gpu.ecc_corrected, gpu.ecc_uncorrected) == (True, 0, 0)
    assert (gpu.pcie_width, gpu.pcie_width_max) == (8, 16)
    assert [(p.pid, p.kind, p.gpu_mem, p.name) for p in snap.processes] == [
        (675, "graphics", 22 * MiB, "/usr/lib/xorg/Xorg"),
        (5762, "compute", 1005 * MiB, "python"),
    ]


def test_gtx_1070_ti_trimmed_old_schema():
    snap = load("gtx-1070-ti_x1_old-schema_telegraf.xml")
    (gpu,) = snap.devices
    assert gpu.name == "GeForce GTX 1070 Ti"
    assert gpu.pci_bus_id == "00000000:01:00.0"  # from <gpu id=...>: no <pci_bus_id> here
    assert (gpu.mem_total, gpu.mem_used, gpu.mem_free) == (4096 * MiB, 42 * MiB, 4054 * MiB)
    assert gpu.fan == 100.0 and gpu.pstate == 8
    assert gpu.power_draw == NA
    assert gpu.power_limit == ABSENT and gpu.throttle == ABSENT
    assert (gpu.pcie_gen, gpu.pcie_width) == (1, 16)
    assert gpu.pcie_gen_max == ABSENT
    assert snap.system.driver_version == ABSENT
    assert snap.time == 0.0 and any("timestamp" in w for w in snap.warnings)


def test_time_argument_overrides_the_file_timestamp():
    text = (XML / "tesla-t4_x1_drv515_telegraf.xml").read_text(encoding="utf-8")
    assert parse_nvsmi_xml(text).time == utc(2023, 4, 24, 16, 22, 39)
    assert parse_nvsmi_xml(text, time=1234.5).time == 1234.5


@pytest.mark.parametrize("path", sorted(XML.glob("*.xml")), ids=lambda p: p.name[:24])
def test_every_sample_survives_the_recording_format(path: Path):
    snap = parse_nvsmi_xml(path.read_text(encoding="utf-8"))
    assert Snapshot.from_dict(snap.to_dict()) == snap


# Synthetic documents for texts no sample carries.

TWO_GPUS = """<?xml version="1.0" ?>
<nvidia_smi_log>
  <driver_version>550.54.14</driver_version>
  <gpu id="00000000:41:00.0">
    <product_name>Second by bus</product_name>
    <minor_number>1</minor_number>
    <fan_speed>[Insufficient Permissions]</fan_speed>
    <performance_state>[Unknown Error]</performance_state>
    <fb_memory_usage><total>[N/A]</total><used>Unknown Error</used>
      <free>[Not Supported]</free></fb_memory_usage>
    <temperature><gpu_temp>[GPU is lost]</gpu_temp></temperature>
    <clocks_event_reasons>
      <clocks_event_reason_sw_power_cap>Active</clocks_event_reason_sw_power_cap>
      <clocks_event_reason_hw_thermal_slowdown>Active</clocks_event_reason_hw_thermal_slowdown>
      <clocks_event_reason_gpu_idle>Not Active</clocks_event_reason_gpu_idle>
    </clocks_event_reasons>
  </gpu>
  <gpu id="00000000:01:00.0">
    <product_name>First by bus</product_name>
    <minor_number>0</minor_number>
    <power_readings>
      <power_draw>180.50 W</power_draw>
      <power_limit>250.00 W</power_limit>
      <default_power_limit>250.00 W</default_power_limit>
      <enforced_power_limit>200.00 W</enforced_power_limit>
    </power_readings>
  </gpu>
</nvidia_smi_log>
"""


def test_devices_are_indexed_in_file_order_not_by_minor_number():
    snap = parse_nvsmi_xml(TWO_GPUS, time=0.0)
    assert [(d.index, d.name) for d in snap.devices] == [(0, "Second by bus"), (1, "First by bus")]


def test_placeholder_texts_become_reasons():
    gpu = parse_nvsmi_xml(TWO_GPUS, time=0.0).devices[0]
    assert gpu.fan == Missing("no_permission")
    assert gpu.pstate == Missing("error", detail="Unknown Error")
    assert gpu.mem_used == Missing("error", detail="Unknown Error")
    assert gpu.mem_total == NA
    assert gpu.mem_free == Missing("unsupported", detail="Not Supported")
    assert gpu.temp_gpu == Missing("gpu_lost")
    # Names from model.THROTTLE, in that order, only the Active ones.
    assert gpu.throttle == ("sw_power_cap", "hw_thermal")


def test_old_schema_power_limit_is_the_enforced_one():
    gpu = parse_nvsmi_xml(TWO_GPUS, time=0.0).devices[1]
    # <power_limit> is what was asked for; <enforced_power_limit> is what holds.
    assert (gpu.power_draw, gpu.power_limit, gpu.power_default_limit) == (180.5, 200.0, 250.0)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "<nvidia_smi_log><gpu></nvidia_smi_log>",
        (TOPO / "rtx-6000-ada_x2_pcie-only-phb_cx7-nics_drv575_stelline.txt").read_text("utf-8"),
        '<?xml version="1.0"?><rocm_smi><card0/></rocm_smi>',
        '<!DOCTYPE x [<!ENTITY a "aaaa">]><nvidia_smi_log>&a;</nvidia_smi_log>',
    ],
    ids=["empty", "malformed", "topo text", "other root", "entity"],
)
def test_wrong_input_raises_a_one_line_value_error(text: str):
    with pytest.raises(ValueError) as err:
        parse_nvsmi_xml(text)
    message = str(err.value)
    assert "nvidia-smi" in message and "\n" not in message


# ----------------------------------------------------------------------------------------------
# nvidia-smi topo -m


def test_h100_single_gpu_with_ansi_header():
    t = topo("nvidia-h100-80gb-hbm3_x1_drv590.48.01_linux_topo-m_single-gpu_ansi.txt")
    assert t == Topology(matrix=(("X",),), cpu_affinity=("0-19",), numa_affinity=("0",))


def test_rtx_2080_on_windows_has_blank_affinity():
    t = topo("nvidia-geforce-rtx-2080-super_x1_drv610.62_windows_topo-m_single-gpu_no-affinity.txt")
    assert t == Topology(matrix=(("X",),), cpu_affinity=("",), numa_affinity=("",))


def test_two_rtx_6000_ada_over_the_host_bridge_without_the_nics():
    t = topo("rtx-6000-ada_x2_pcie-only-phb_cx7-nics_drv575_stelline.txt")
    assert t.matrix == (("X", "PHB"), ("PHB", "X"))
    assert t.cpu_affinity == ("0-23", "0-23")
    assert t.numa_affinity == ("0", "0")


def test_four_rtx_6000_ada_across_two_numa_nodes():
    t = topo("rtx-6000-ada_x4_pcie-only-2numa_cx7-nics_drv575_stelline.txt")
    assert t.matrix == (
        ("X", "NODE", "SYS", "SYS"),
        ("NODE", "X", "SYS", "SYS"),
        ("SYS", "SYS", "X", "NODE"),
        ("SYS", "SYS", "NODE", "X"),
    )
    assert t.cpu_affinity == ("0-31", "0-31", "32-63", "32-63")
    assert t.numa_affinity == ("0", "0", "1", "1")


@pytest.mark.parametrize(
    "name",
    [
        "nvidia-geforce-rtx-2080-super_x1_drv610.62_windows_topo-m_single-gpu_no-affinity.txt",
        "nvidia-h100-80gb-hbm3_x1_drv590.48.01_linux_topo-m_single-gpu_ansi.txt",
    ],
)
def test_tabs_expanded_to_spaces_read_the_same(name: str):
    text = (TOPO / name).read_text(encoding="utf-8")
    assert parse_topo_matrix(text.expandtabs()) == parse_topo_matrix(text)


def test_blank_affinity_lost_in_expanded_tabs_is_not_taken_from_gpu_numa_id():
    # Synthetic: a GPU NUMA ID of 2 with blank affinity cells, tabs expanded to spaces.
    text = (
        "        GPU0    CPU Affinity    NUMA Affinity   GPU NUMA ID\n"
        "GPU0     X                                      2\n"
    )
    assert parse_topo_matrix(text) == Topology(
        matrix=(("X",),), cpu_affinity=("",), numa_affinity=("",)
    )


P2P_MATRIX = """        GPU0    GPU1
 GPU0   X       CNS
 GPU1   CNS     X
"""


def test_topology_rejects_other_text():
    xml = (XML / "tesla-t4_x1_drv515_telegraf.xml").read_text(encoding="utf-8")
    for text in ("", xml, P2P_MATRIX):
        with pytest.raises(ValueError, match="nvidia-smi topo -m") as err:
            parse_topo_matrix(text)
        assert "\n" not in str(err.value)


def test_topology_rejects_a_matrix_missing_a_gpu_row():
    text = (TOPO / "rtx-6000-ada_x4_pcie-only-2numa_cx7-nics_drv575_stelline.txt").read_text(
        encoding="utf-8"
    )
    cut = "\n".join(line for line in text.splitlines() if not line.startswith("GPU2"))
    with pytest.raises(ValueError, match="not square"):
        parse_topo_matrix(cut)
