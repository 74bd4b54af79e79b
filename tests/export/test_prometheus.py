"""`gputop serve` as Prometheus and Grafana meet it: dcgm-exporter's names, labels and units for
what the Snapshot holds, nothing for what it does not, gputop's own process / Finding / host
metrics, hostile process names that stay one label value, and a real scrape over loopback."""

from __future__ import annotations

import dataclasses
import gzip
import json
import re
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from gputop.commands.args import parse_address
from gputop.commands.main import main
from gputop.diagnose.types import Finding
from gputop.errors import GputopError
from gputop.export.prometheus import (
    DEVICE_METRICS,
    MIB,
    ExportState,
    command,
    exposition,
    families,
)
from gputop.export.server import Exporter, listen
from gputop.feeds.playback import RecordingFeed, demo_path
from gputop.model import JobInfo, MigDevice, Missing, ProcessSample, Snapshot
from gputop.recording import RecordingWriter
from gputop.report.summary import SummaryKeeper
from gputop.safetext import printable
from gputop.testing.synthetic import node, series

ROOT = Path(__file__).resolve().parents[2]
NOW = 1_900_000_000.0
GPU_LABELS = {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname",
              "DCGM_FI_DRIVER_VERSION"}


@pytest.fixture(scope="module")
def demo() -> Snapshot:
    feed = RecordingFeed.from_file(demo_path(), loop=False, retime=False)
    feed.skip(200)  # training is running: every GPU busy, NVLink traffic, processes
    return feed.poll_once()


def state_of(snap: Snapshot, **kw: Any) -> ExportState:
    return ExportState(snapshot=snap, polled_at=NOW, ok=True, **kw)


def scrape(state: ExportState, now: float = NOW) -> str:
    return exposition(families(state, now)).decode("utf-8")


def parse(text: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def value(fams: dict[str, Any], name: str, **labels: str) -> float:
    got = [s.value for s in fams[name].samples
           if all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(got) == 1, (name, labels, got)
    return got[0]


# ----------------------------------------------------------------------------------------------
# DCGM names, labels, units


def test_demo_gpus_read_as_dcgm_exporter_would_serve_them(demo: Snapshot) -> None:
    fams = parse(scrape(state_of(demo)))
    d = demo.devices[3]
    gpu = {"gpu": "3"}
    labels = next(s.labels for s in fams["DCGM_FI_DEV_GPU_UTIL"].samples if s.labels["gpu"] == "3")
    assert labels == {"gpu": "3", "UUID": d.uuid, "pci_bus_id": d.pci_bus_id, "device": "nvidia3",
                      "modelName": d.name, "Hostname": demo.host.hostname,
                      "DCGM_FI_DRIVER_VERSION": demo.system.driver_version}
    assert d.name == "NVIDIA H100 80GB HBM3" and demo.host.hostname
    # MiB, not bytes; W; mJ; MHz; °C; % stays %; PROF fields are ratios.
    assert value(fams, "DCGM_FI_DEV_FB_USED", **gpu) == d.mem_used // MIB
    assert value(fams, "DCGM_FI_DEV_FB_TOTAL", **gpu) == 81559  # an H100 80GB, as DCGM says
    assert value(fams, "DCGM_FI_DEV_FB_FREE", **gpu) == d.mem_free // MIB
    assert value(fams, "DCGM_FI_DEV_FB_RESERVED", **gpu) == d.mem_reserved // MIB
    assert value(fams, "DCGM_FI_DEV_POWER_USAGE", **gpu) == d.power_draw
    assert value(fams, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", **gpu) == round(d.energy_j * 1000)
    assert value(fams, "DCGM_FI_DEV_SM_CLOCK", **gpu) == d.clock_sm
    assert value(fams, "DCGM_FI_DEV_GPU_TEMP", **gpu) == d.temp_gpu
    assert value(fams, "DCGM_FI_DEV_MEMORY_TEMP", **gpu) == d.temp_mem
    assert value(fams, "DCGM_FI_DEV_GPU_UTIL", **gpu) == d.util_gpu
    assert value(fams, "DCGM_FI_PROF_SM_ACTIVE", **gpu) == pytest.approx(d.sm_active / 100)
    assert value(fams, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", **gpu) == \
        pytest.approx(d.tensor_active / 100)
    assert 0 < value(fams, "DCGM_FI_PROF_DRAM_ACTIVE", **gpu) <= 1
    assert value(fams, "DCGM_FI_DEV_POWER_VIOLATION", **gpu) == \
        round(d.throttle_time["sw_power_cap"] * 1e9)
    assert value(fams, "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", **gpu) == d.pcie_replays
    assert value(fams, "DCGM_FI_PROF_PCIE_RX_BYTES", **gpu) == d.pcie_rx
    tx = sum(lk.tx for lk in demo.links if lk.device_index == 3)
    assert value(fams, "DCGM_FI_PROF_NVLINK_TX_BYTES", **gpu) == pytest.approx(tx)
    assert len(fams["DCGM_FI_DEV_GPU_UTIL"].samples) == 8
    # dcgm-exporter's types: energy, replays, remapped rows, violations are counters.
    for name, typ, _, _ in DEVICE_METRICS:
        if name in fams:
            assert fams[name].type == typ, name
            assert {k for s in fams[name].samples for k in s.labels} == GPU_LABELS, name


def test_counters_keep_dcgm_names_without_total(demo: Snapshot) -> None:
    text = scrape(state_of(demo))
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n" in text
    assert re.search(r"^DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION\{", text, re.M)
    assert "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION_total" not in text
    assert "# TYPE gputop_findings_total counter\n" in text  # gputop's own end in _total


def test_every_exported_value_round_trips(demo: Snapshot) -> None:
    fams = parse(scrape(state_of(demo)))
    for d in demo.devices:
        for name, _, _, get in DEVICE_METRICS:
            want = get(d)
            if want is None:
                assert name not in fams or not any(
                    s.labels["gpu"] == str(d.index) for s in fams[name].samples), name
            else:
                assert value(fams, name, gpu=str(d.index)) == pytest.approx(want), name


def test_clock_event_reasons_are_nvml_bits_and_one_series_per_reason() -> None:
    snap = node(1, throttle=("sw_power_cap", "hw_thermal"))
    fams = parse(scrape(state_of(snap)))
    assert value(fams, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", gpu="0") == 0x4 | 0x40
    assert value(fams, "gputop_clock_event_active", reason="hw_thermal") == 1
    assert value(fams, "gputop_clock_event_active", reason="gpu_idle") == 0


def test_missing_fields_are_not_exported_as_zero() -> None:
    snap = node(2, temp_mem=Missing("unsupported"), pcie_rx=Missing("pending"))
    d1 = dataclasses.replace(snap.devices[1], fan=55.0, ecc_corrected=Missing("no_permission"))
    snap = dataclasses.replace(snap, devices=(snap.devices[0], d1))
    fams = parse(scrape(state_of(snap)))
    assert "DCGM_FI_DEV_MEMORY_TEMP" not in fams  # no GPU has it: not even a HELP line
    assert "DCGM_FI_PROF_PCIE_RX_BYTES" not in fams
    assert [s.labels["gpu"] for s in fams["DCGM_FI_DEV_FAN_SPEED"].samples] == ["1"]
    assert [s.labels["gpu"] for s in fams["DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"].samples] == ["0"]
    assert "DCGM_FI_DEV_MEMORY_TEMP" not in scrape(state_of(snap))


def test_a_lost_gpu_exports_only_that_it_is_lost() -> None:
    snap = node(2)
    lost = dataclasses.replace(snap.devices[1], lost=Missing("gpu_lost", since=NOW - 5))
    fams = parse(scrape(state_of(dataclasses.replace(snap, devices=(snap.devices[0], lost)))))
    assert value(fams, "gputop_gpu_lost", gpu="1") == 1
    assert value(fams, "gputop_gpu_lost", gpu="0") == 0
    assert [s.labels["gpu"] for s in fams["DCGM_FI_DEV_GPU_UTIL"].samples] == ["0"]


def test_mig_memory_is_per_instance_with_dcgm_labels() -> None:
    migs = (MigDevice(1, 0, name="NVIDIA H100 80GB HBM3 MIG 3g.40gb", mem_total=40 << 30,
                      mem_used=10 << 30, sm_active=Missing("unsupported")),
            MigDevice(2, 0, name="NVIDIA H100 80GB HBM3 MIG 3g.40gb", mem_total=40 << 30,
                      mem_used=1 << 30, sm_active=Missing("unsupported")))
    snap = node(1, mig_enabled=True, mig_devices=migs)
    fams = parse(scrape(state_of(snap)))
    used = {s.labels["GPU_I_ID"]: s.value for s in fams["DCGM_FI_DEV_FB_USED"].samples}
    assert used == {"1": 10 * 1024, "2": 1024}
    assert {s.labels["GPU_I_PROFILE"] for s in fams["DCGM_FI_DEV_FB_USED"].samples} == {"3g.40gb"}
    assert "DCGM_FI_PROF_SM_ACTIVE" not in fams  # per instance, and no instance has it
    assert value(fams, "DCGM_FI_DEV_MIG_MODE", gpu="0") == 1


def test_hostname_flag_wins_over_the_recorded_host(demo: Snapshot) -> None:
    fams = parse(scrape(state_of(demo, hostname="node-b")))
    assert {s.labels["Hostname"] for f in fams.values() for s in f.samples
            if "Hostname" in s.labels} == {"node-b"}


def test_hostname_label_spelled_as_dcgm_exporters_next_release(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--demo", "--once", "--hostname", "node-c",
                 "--hostname-label", "hostname"]) == 0
    fams = parse(capsys.readouterr().out)
    labelled = [s.labels for f in fams.values() for s in f.samples
                if not f.name.startswith("process_")]
    assert all("Hostname" not in labels for labels in labelled)
    assert {labels.get("hostname") for labels in labelled} == {"node-c"}
    labels = fams["DCGM_FI_DEV_GPU_UTIL"].samples[0].labels
    assert list(labels)[5] == "hostname"  # where dcgm-exporter writes it
    with pytest.raises(SystemExit):
        main(["serve", "--demo", "--once", "--hostname-label", "HOSTNAME"])
    assert "invalid choice" in capsys.readouterr().err


def test_nvlink_bandwidth_total_is_a_counter_of_dcgms_whole_mb_per_s(demo: Snapshot) -> None:
    text = scrape(state_of(demo))
    assert "# TYPE DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL counter\n" in text
    fams = parse(text)
    rx = sum(lk.rx for lk in demo.links if lk.device_index == 3)
    tx = sum(lk.tx for lk in demo.links if lk.device_index == 3)
    got = value(fams, "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", gpu="3")
    assert got == int((rx + tx) / 1024 / 1000) > 0
    assert re.search(r"^DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL\{.*\} \d+$", text, re.M)
    assert "gputop_host_cpu_count" not in text
    assert value(fams, "gputop_host_cpus") == demo.host.cpu_count


# ----------------------------------------------------------------------------------------------
# gputop's own metrics


def test_processes_carry_their_job(demo: Snapshot) -> None:
    fams = parse(scrape(state_of(demo)))
    p = next(p for p in demo.processes if p.job is not None and p.job.slurm_job_id)
    labels = next(s.labels for s in fams["gputop_process_gpu_memory_bytes"].samples
                  if s.labels["pid"] == str(p.pid))
    assert labels["command"] == p.name and labels["user"] == p.user
    assert labels["hpc_job"] == p.job.slurm_job_id and labels["gpu"] == str(p.device_index)
    assert labels["UUID"] == demo.devices[p.device_index].uuid
    assert value(fams, "gputop_process_gpu_memory_bytes", pid=str(p.pid)) == p.gpu_mem
    assert value(fams, "gputop_process_sm_utilization_percent", pid=str(p.pid)) == p.sm_util

    uid = "6f1c2d3e-4a5b-4c6d-8e7f-0123456789ab"
    pod = dataclasses.replace(p, job=JobInfo(container_id="3f2a9c1b7d4e5f60718293a4b5c6d7e8",
                                             container_runtime="containerd", pod_uid=uid,
                                             pod_name="train-0", pod_namespace="research"))
    fams = parse(scrape(state_of(dataclasses.replace(demo, processes=(pod,)))))
    s = fams["gputop_process_gpu_memory_bytes"].samples[0]
    assert (s.labels["container"], s.labels["pod"], s.labels["pod_uid"],
            s.labels["namespace"], s.labels["hpc_job"]) == \
        ("3f2a9c1b7d4e", "train-0", uid, "research", "")


HOSTILE = 'evil"} 1\n# TYPE fake counter\nfake_total 1\x1b[2J\\\u202e' + "x" * 100


def test_hostile_process_names_stay_one_label_value() -> None:
    snap = node(1, processes=False)
    p = ProcessSample(pid=4242, device_index=0, gpu_mem=1 << 30, sm_util=5.0, name=HOSTILE,
                      user='root"\n', cmdline=(HOSTILE,))
    text = scrape(state_of(dataclasses.replace(snap, processes=(p,))))
    for line in text.splitlines():  # nothing the name holds starts a line of its own
        assert line.startswith(("# HELP ", "# TYPE ", "DCGM_", "gputop_")), line
    fams = parse(text)
    assert "fake" not in fams
    labels = fams["gputop_process_gpu_memory_bytes"].samples[0].labels
    assert labels["command"] == command(p) == printable(HOSTILE)[:63] + "…"
    assert len(labels["command"]) == 64
    assert "\x1b" not in labels["command"] and "\n" not in labels["command"]
    assert labels["user"] == 'root"\\n'


def test_open_findings_and_counts_by_severity(demo: Snapshot) -> None:
    found = [Finding("loader.starvation", "warning", 2, 2210433, "GPU 2 waits", NOW - 60, None),
             Finding("health.ecc", "critical", None, None, "ECC", NOW - 10, None),
             Finding("throttle.power", "info", 1, None, "capped", NOW - 90, NOW - 5)]
    state = state_of(demo, findings=found, findings_opened={"warning": 3, "critical": 1})
    fams = parse(scrape(state))
    open_ = {(s.labels["id"], s.labels["gpu"], s.labels["pid"]): s.labels["severity"]
             for s in fams["gputop_finding_open"].samples}
    assert open_ == {("loader.starvation", "2", "2210433"): "warning",
                     ("health.ecc", "", ""): "critical"}
    assert value(fams, "gputop_findings_open", severity="warning") == 1
    assert value(fams, "gputop_findings_open", severity="info") == 0
    assert fams["gputop_findings"].type == "counter"
    assert value(fams, "gputop_findings", severity="warning") == 3
    assert value(fams, "gputop_findings", severity="info") == 0


def test_host_and_exporter_health(demo: Snapshot) -> None:
    fams = parse(scrape(state_of(demo, poll_seconds=0.02)))
    assert value(fams, "gputop_up") == 1
    assert value(fams, "gputop_last_poll_timestamp_seconds") == demo.time
    assert value(fams, "gputop_host_memory_total_bytes") == demo.host.mem_total
    assert value(fams, "gputop_host_load1") == demo.host.load_avg[0]
    assert value(fams, "gputop_host_pressure_some_percent", resource="cpu") == \
        demo.host.psi_cpu_some
    assert value(fams, "gputop_info", driver_version=demo.system.driver_version) == 1


def test_a_stale_snapshot_is_not_exported(demo: Snapshot) -> None:
    fams = parse(scrape(state_of(demo), now=NOW + 60))
    assert value(fams, "gputop_up") == 0
    assert "gputop_last_poll_timestamp_seconds" in fams
    assert not [n for n in fams if n.startswith("DCGM_")]
    assert value(parse(scrape(ExportState(), now=NOW)), "gputop_up") == 0


# ----------------------------------------------------------------------------------------------
# the exporter: polls, failures, HTTP


class FlakyFeed:
    def __init__(self, snaps: list[Snapshot]) -> None:
        self.snaps = snaps
        self.fail = False

    def poll_once(self) -> Snapshot:
        if self.fail:
            raise GputopError("the GPU driver did not answer")
        return self.snaps.pop(0)

    def close(self) -> None:
        pass


class ScriptedEngine:
    def __init__(self, *ticks: list[Finding]) -> None:
        self.ticks = list(ticks)

    def update(self, snap: Snapshot) -> list[Finding]:
        return self.ticks.pop(0)


def test_exporter_counts_findings_once_and_survives_a_failed_poll() -> None:
    f = Finding("loader.starvation", "warning", 0, None, "waits", NOW - 30, None)
    g = Finding("health.ecc", "critical", 1, None, "ECC", NOW - 1, None)
    feed = FlakyFeed(series(3))
    clock = [NOW]
    exporter = Exporter(feed, interval=5, engine=ScriptedEngine([f], [f, g], [g]),
                        clock=lambda: clock[0])
    for _ in range(3):
        exporter.poll()
    assert exporter.state.findings_opened == {"warning": 1, "critical": 1}
    assert exporter.state.hostname == "node"

    feed.fail = True
    exporter.poll()
    fams = parse(exposition(exporter.registry().collect()).decode())
    assert value(fams, "gputop_up") == 0
    assert value(fams, "gputop_poll_errors") == 1
    assert "DCGM_FI_DEV_GPU_UTIL" in fams  # the last snapshot is still recent
    clock[0] += 60
    fams = parse(exposition(exporter.registry().collect()).decode())
    assert "DCGM_FI_DEV_GPU_UTIL" not in fams
    assert "process_cpu_seconds" in fams  # gputop's own cost, for the bench and for operators


@pytest.fixture()
def served() -> Iterator[str]:
    exporter = Exporter(RecordingFeed(series(5, 8)), interval=0.05, hostname="node-a")
    exporter.poll()
    server = listen(("127.0.0.1", 0), exporter.registry())
    threading.Thread(target=server.serve_forever, daemon=True).start()
    exporter.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        exporter.stop()
        server.shutdown()
        server.server_close()


def test_a_real_scrape_over_loopback(served: str) -> None:
    with urllib.request.urlopen(served + "/metrics", timeout=10) as r:
        assert r.status == 200
        assert r.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        fams = parse(r.read().decode("utf-8"))
    assert len(fams["DCGM_FI_DEV_GPU_UTIL"].samples) == 8
    assert {s.labels["Hostname"] for s in fams["DCGM_FI_DEV_GPU_UTIL"].samples} == {"node-a"}
    assert value(fams, "gputop_up") == 1
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(served + "/nothing", timeout=10)
    assert e.value.code == 404


# What Prometheus 2.42 (Debian 12's) and 3.x send.
PROMETHEUS_2_ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
                       "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
PROMETHEUS_3_ACCEPT = ("application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,"
                       "application/openmetrics-text;version=0.0.1;q=0.4,text/plain;"
                       "version=1.0.0;escaping=allow-utf-8;q=0.3,text/plain;version=0.0.4;q=0.2,"
                       "*/*;q=0.1")


def get(url: str, **headers: str) -> tuple[dict[str, str], bytes]:
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as r:
        return dict(r.headers.items()), r.read()


@pytest.mark.parametrize("accept", [PROMETHEUS_2_ACCEPT, PROMETHEUS_3_ACCEPT])
def test_prometheus_gets_openmetrics_gzipped_with_the_same_series(served: str,
                                                                  accept: str) -> None:
    headers, body = get(served + "/metrics", Accept=accept, **{"Accept-Encoding": "gzip"})
    assert headers["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
    assert headers["Content-Encoding"] == "gzip"
    assert int(headers["Content-Length"]) == len(body)
    text = gzip.decompress(body).decode("utf-8")
    assert text.endswith("# EOF\n")
    om = {f.name: f for f in openmetrics_families(text)}  # the strict OpenMetrics parser
    _, plain = get(served + "/metrics")
    assert len(body) * 5 < len(plain)
    # The same samples under the same names in either format (as on the wire: the text parser
    # would rename DCGM's counters).
    def names(text: str) -> set[str]:
        return {n for n in re.findall(r"^([A-Za-z_:][A-Za-z0-9_:]*)", text, re.M)
                if not n.startswith("process_") and not n.endswith("_created")}
    assert names(text) == names(plain.decode()) != set()
    # DCGM's counters keep their names; OpenMetrics types them unknown, gputop's stay counters.
    assert om["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].type == "unknown"
    assert om["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].samples[0].name == \
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
    assert om["gputop_poll_errors"].type == "counter"
    assert om["DCGM_FI_DEV_GPU_UTIL"].type == "gauge"


@pytest.mark.parametrize(("headers", "encoding"), [
    ({}, None),
    ({"Accept": "text/plain;version=0.0.4"}, None),
    ({"Accept": "text/plain;version=0.0.4", "Accept-Encoding": "gzip, deflate"}, "gzip"),
    ({"Accept": "application/json", "Accept-Encoding": "br"}, None),
])
def test_other_scrapers_get_the_text_format(served: str, headers: dict[str, str],
                                            encoding: str | None) -> None:
    got, body = get(served + "/metrics", **headers)
    assert got["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert got.get("Content-Encoding") == encoding
    text = (gzip.decompress(body) if encoding else body).decode("utf-8")
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n" in text


PROMTOOL = shutil.which("promtool")
# dcgm-exporter's own names, which promtool's lint does not like and dashboards depend on.
DCGM_LABELS = {"UUID", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION", "GPU_I_PROFILE",
               "GPU_I_ID"}


@pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (Debian: prometheus)")
@pytest.mark.parametrize("args", [["--demo"], ["--demo", "--hostname-label", "hostname"]])
def test_promtool_finds_nothing_but_dcgm_exporters_own_names(
        args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--once", *args]) == 0
    text = capsys.readouterr().out
    r = subprocess.run([str(PROMTOOL), "check", "metrics"], input=text, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode in (0, 3), r.stderr  # 3: lint problems, listed on stderr
    fams = parse(text)
    problems = set(r.stdout.splitlines() + r.stderr.splitlines())
    assert problems, "promtool found nothing: is it reading the scrape?"
    for line in problems:
        metric, _, problem = line.partition(" ")
        if problem == 'counter metrics should have "_total" suffix' or \
                problem == "metric name should not include type 'counter'":
            assert metric.startswith("DCGM_FI_"), line
        elif problem == "label names should be written in 'snake_case' not 'camelCase'":
            family = metric.removesuffix("_total") if metric.startswith("gputop_") else metric
            labels = {k for s in fams[family].samples for k in s.labels}
            camel = {k for k in labels if k != k.lower()}
            assert camel and camel <= DCGM_LABELS, line
        else:
            raise AssertionError(f"promtool: {line}")


def test_port_in_use_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(GputopError, match="in use"):
            listen(("127.0.0.1", port), Exporter(None, interval=1).registry())
        assert main(["serve", "--replay", str(recording(tmp_path)), "--metrics",
                     f"127.0.0.1:{port}"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"127.0.0.1:{port}: the port is in use" in err
    assert "Traceback" not in err


def recording(tmp_path: Path) -> Path:
    path = tmp_path / "node.jsonl.gz"
    with RecordingWriter(path, summarizer=SummaryKeeper()) as w:
        for snap in series(3, 2):
            w.write(snap)
    return path


def test_serve_once_prints_a_replayed_node_under_its_given_name(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["serve", "--replay", str(recording(tmp_path)), "--hostname", "node-a",
                 "--once"]) == 0
    fams = parse(capsys.readouterr().out)
    assert {s.labels["Hostname"] for s in fams["DCGM_FI_DEV_FB_USED"].samples} == {"node-a"}
    assert abs(value(fams, "gputop_last_poll_timestamp_seconds") - time.time()) < 60  # retimed


@pytest.mark.parametrize(("text", "address"), [
    ("9400", ("127.0.0.1", 9400)),
    (":9400", ("0.0.0.0", 9400)),
    ("0.0.0.0:9500", ("0.0.0.0", 9500)),
    ("[::1]:9400", ("::1", 9400)),
    ("localhost:0", ("localhost", 0)),
])
def test_metrics_address(text: str, address: tuple[str, int]) -> None:
    assert parse_address(text) == address


def test_bad_metrics_address_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["serve", "--metrics", "host:port"])
    assert e.value.code == 2 and "not HOST:PORT" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------
# what others read: docs/metrics.md and the Grafana dashboard


def served_names(demo: Snapshot) -> set[str]:
    f = Finding("loader.starvation", "warning", 0, None, "waits", NOW - 30, None)
    snaps = [demo, node(1, fan=50.0, throttle=("sw_power_cap",))]
    names: set[str] = set()
    for snap in snaps:
        for fam in text_string_to_metric_families(scrape(state_of(snap, findings=[f]))):
            names.update(s.name for s in fam.samples)
    # The parser names a counter's samples `..._total`; DCGM's have no such suffix on the wire.
    return {n[:-6] if n.startswith("DCGM_") and n.endswith("_total") else n for n in names}


def test_docs_list_every_metric_served(demo: Snapshot) -> None:
    doc = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"`((?:DCGM_FI|gputop)_[A-Za-z0-9_]+)`", doc))
    assert served_names(demo) - documented == set()


def test_grafana_dashboard_queries_only_metrics_the_exporter_serves(demo: Snapshot) -> None:
    board = json.loads((ROOT / "examples" / "grafana" / "gputop.json").read_text("utf-8"))
    exprs = [t["expr"] for panel in board["panels"] for t in panel.get("targets", [])]
    exprs += [v["query"]["query"] if isinstance(v.get("query"), dict) else v.get("query", "")
              for v in board.get("templating", {}).get("list", [])]
    queried = {m for e in exprs for m in re.findall(r"\b(?:DCGM_FI|gputop)_[A-Za-z0-9_]+", e)}
    assert {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "gputop_finding_open"} <= queried
    assert queried - served_names(demo) == set()


def test_live_nvml_through_the_fake_library(capsys: pytest.CaptureFixture[str]) -> None:
    from gputop.testing.fake_nvml import FakeNvml

    with FakeNvml([node(2, links=4)]):
        assert main(["serve", "--once", "--hostname", "gpu-07"]) == 0
    fams = parse(capsys.readouterr().out)
    assert value(fams, "DCGM_FI_DEV_FB_USED", gpu="1") == 10 * 1024
    assert value(fams, "DCGM_FI_DEV_POWER_USAGE", gpu="0") == 640
    assert value(fams, "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", gpu="0") == 0x4
    # Rates and GPM need two readings: after one poll they are pending, so not exported yet.
    assert "DCGM_FI_PROF_SM_ACTIVE" not in fams
    assert "DCGM_FI_PROF_NVLINK_RX_BYTES" not in fams
