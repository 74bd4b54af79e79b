"""`gputop serve --kubernetes` on a GPU node: each GPU's series say which pod the kubelet gave it,
read as dcgm-exporter reads it from the kubelet's pod-resources gRPC API, here a fake kubelet
(grpcio's own server) on a unix socket, through the live NVML path of the fake library."""

from __future__ import annotations

import dataclasses
import io
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("grpc", reason="the k8s extra (grpcio, protobuf) is not installed")

from prometheus_client.parser import text_string_to_metric_families

from gputop.commands.main import main
from gputop.errors import GputopError
from gputop.export.prometheus import ExportState, exposition, families
from gputop.export.server import Exporter
from gputop.feeds.playback import RecordingFeed
from gputop.model import JobInfo, MigDevice, ProcessSample
from gputop.sources.pod_resources import PodRef, PodResources
from gputop.testing.fake_kubelet import FakeContainer, FakeKubelet, FakePod
from gputop.testing.synthetic import node, series

GPU = "nvidia.com/gpu"
NOW = 1_900_000_000.0


def uuid(i: int) -> str:
    return node(8).devices[i].uuid


def cluster() -> list[FakePod]:
    """GPUs 0-1 to a trainer, GPU 3 by index (DEVICE_ID_STRATEGY=index), a time-sliced replica of
    GPU 5, and GPU 6's UUID under a resource that is not a GPU."""
    return [
        FakePod("train-0", "research", [
            FakeContainer("loader"),  # no devices
            FakeContainer("trainer", {GPU: [uuid(0), uuid(1)], "example.com/nic": ["eth1"]}),
        ]),
        FakePod("notebook-7f9c", "team-a", [FakeContainer("jupyter", {GPU: ["3"]})]),
        FakePod("infer-1", "serving", [FakeContainer("triton", {GPU: [f"{uuid(5)}::2"]})]),
        FakePod("fpga-job", "hw", [FakeContainer("x", {"example.com/fpga": [uuid(6)]})]),
    ]


@pytest.fixture()
def kubelet(tmp_path: Path) -> Iterator[FakeKubelet]:
    # A short path: unix socket paths are limited to 107 bytes.
    with FakeKubelet(str(tmp_path / "kubelet.sock"), cluster()) as fake:
        yield fake


def parse(text: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def pod_labels(fams: dict[str, Any], name: str) -> dict[str, tuple[str, str, str] | None]:
    out: dict[str, tuple[str, str, str] | None] = {}
    for s in fams[name].samples:
        got = tuple(s.labels.get(k) for k in ("pod", "namespace", "container"))
        out[s.labels["gpu"]] = None if got == (None, None, None) else got  # type: ignore[assignment]
    return out


def test_each_gpus_series_name_the_pod_the_kubelet_gave_it(
        kubelet: FakeKubelet, capsys: pytest.CaptureFixture[str]) -> None:
    from gputop.testing.fake_nvml import FakeNvml

    with FakeNvml([node(8, links=4)]):
        assert main(["serve", "--once", "--hostname", "gpu-07", "--pod-resources-socket",
                     kubelet.socket_path]) == 0
    out = capsys.readouterr()
    assert out.err == ""
    fams = parse(out.out)
    want = {"0": ("train-0", "research", "trainer"), "1": ("train-0", "research", "trainer"),
            "2": None, "3": ("notebook-7f9c", "team-a", "jupyter"),
            "4": None, "5": ("infer-1", "serving", "triton"), "6": None, "7": None}
    for name in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE",
                 "gputop_gpu_lost"):
        assert pod_labels(fams, name) == want, name
    # dcgm-exporter's labels first, the pod's after them.
    s = next(s for s in fams["DCGM_FI_DEV_GPU_UTIL"].samples if s.labels["gpu"] == "0")
    assert list(s.labels) == ["gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname",
                              "DCGM_FI_DRIVER_VERSION", "pod", "namespace", "container"]
    # Host-wide series have no GPU, so no pod.
    assert "pod" not in fams["gputop_up"].samples[0].labels
    assert kubelet.calls == 1


def test_a_kubelet_that_stops_answering_drops_the_labels_and_says_so_once(
        kubelet: FakeKubelet) -> None:
    err = io.StringIO()
    pods = PodResources(kubelet.socket_path, timeout=5)
    exporter = Exporter(RecordingFeed(series(6, 8)), interval=1, pods=pods, err=err,
                        clock=lambda: NOW)
    try:
        exporter.poll()
        assert exporter.state.pods[uuid(0)] == PodRef("train-0", "research", "trainer")
        kubelet.fail = True
        exporter.poll()
        exporter.poll()
        assert exporter.state.ok and exporter.state.pods == {}
        fams = parse(exposition(families(exporter.state, NOW)).decode())
        assert pod_labels(fams, "DCGM_FI_DEV_GPU_UTIL")["0"] is None
        assert err.getvalue().count("\n") == 1
        assert "pod-resources socket" in err.getvalue() and "UNAVAILABLE" in err.getvalue()
        kubelet.fail = False
        kubelet.pods = [FakePod("train-1", "research", [FakeContainer("t", {GPU: [uuid(0)]})])]
        exporter.poll()
        assert exporter.state.pods == {uuid(0): PodRef("train-1", "research", "t")}
    finally:
        pods.close()


def test_no_kubelet_socket_is_a_warning_not_a_failed_poll(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gputop.testing.fake_nvml import FakeNvml

    with FakeNvml([node(2)]):
        assert main(["serve", "--once", "--pod-resources-socket",
                     str(tmp_path / "absent.sock")]) == 0
    out = capsys.readouterr()
    assert "gputop: warning: the kubelet's pod-resources socket" in out.err
    assert out.err.count("\n") == 1
    assert pod_labels(parse(out.out), "DCGM_FI_DEV_GPU_UTIL") == {"0": None, "1": None}


def test_without_grpcio_kubernetes_mode_is_one_line(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "grpc", None)  # import grpc now raises ImportError
    with pytest.raises(GputopError, match=r"gputop-ml\[k8s\]"):
        PodResources("/nonexistent.sock")
    assert main(["serve", "--demo", "--once", "--kubernetes"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'gputop-ml[k8s]'" in err
    assert "Traceback" not in err


def test_mig_instances_carry_the_pod_of_their_mig_device(kubelet: FakeKubelet) -> None:
    migs = (MigDevice(1, 0, uuid="MIG-5c9e4b7d-0000-5000-8000-000000000001",
                      name="NVIDIA H100 80GB HBM3 MIG 3g.40gb", mem_total=40 << 30,
                      mem_used=10 << 30),
            MigDevice(2, 0, uuid="MIG-5c9e4b7d-0000-5000-8000-000000000002",
                      name="NVIDIA H100 80GB HBM3 MIG 3g.40gb", mem_total=40 << 30,
                      mem_used=1 << 30))
    snap = node(1, mig_enabled=True, mig_devices=migs, processes=False)
    kubelet.pods = [FakePod("small-0", "team-b", [FakeContainer(
        "c", {"nvidia.com/mig-3g.40gb": ["MIG-5c9e4b7d-0000-5000-8000-000000000002"]})])]
    pods = PodResources(kubelet.socket_path)
    try:
        state = ExportState(snapshot=snap, polled_at=NOW, ok=True, pods=pods.gpu_pods())
    finally:
        pods.close()
    fams = parse(exposition(families(state, NOW)).decode())
    by_instance = {s.labels["GPU_I_ID"]: s.labels.get("pod")
                   for s in fams["DCGM_FI_DEV_FB_USED"].samples}
    assert by_instance == {"1": None, "2": "small-0"}


def test_a_process_whose_environment_is_unreadable_is_named_after_its_gpus_pod() -> None:
    snap = node(2, processes=False)
    in_pod = JobInfo(container_id="3f2a9c1b7d4e5f60718293a4b5c6d7e8",
                     pod_uid="6f1c2d3e-4a5b-4c6d-8e7f-0123456789ab")
    procs = (
        ProcessSample(pid=100, device_index=0, gpu_mem=1 << 30, name="python", job=in_pod),
        # The downward API said otherwise: what the process's own environment says wins.
        ProcessSample(pid=101, device_index=0, gpu_mem=1 << 30, name="python",
                      job=dataclasses.replace(in_pod, pod_name="own", pod_namespace="mine")),
        # Not in a pod at all (a process on the host): no pod, whatever the GPU's.
        ProcessSample(pid=102, device_index=0, gpu_mem=1 << 30, name="nvtop"),
        # GPU 1 was given to no pod.
        ProcessSample(pid=103, device_index=1, gpu_mem=1 << 30, name="python", job=in_pod),
    )
    pods = {snap.devices[0].uuid: PodRef("train-0", "research", "trainer")}
    state = ExportState(snapshot=dataclasses.replace(snap, processes=procs), polled_at=NOW,
                        ok=True, pods=pods)
    fams = parse(exposition(families(state, NOW)).decode())
    got = {s.labels["pid"]: (s.labels["pod"], s.labels["namespace"])
           for s in fams["gputop_process_gpu_memory_bytes"].samples}
    assert got == {"100": ("train-0", "research"), "101": ("own", "mine"), "102": ("", ""),
                   "103": ("", "")}


def test_the_pod_names_are_one_label_value_whatever_they_hold(kubelet: FakeKubelet) -> None:
    kubelet.pods = [FakePod('evil"} 1\n#', "ns\x1b[2J", [FakeContainer("c", {GPU: [uuid(0)]})])]
    pods = PodResources(kubelet.socket_path)
    try:
        state = ExportState(snapshot=node(1), polled_at=NOW, ok=True, pods=pods.gpu_pods())
    finally:
        pods.close()
    text = exposition(families(state, NOW)).decode()
    for line in text.splitlines():
        assert line.startswith(("# HELP ", "# TYPE ", "DCGM_", "gputop_")), line
    s = parse(text)["DCGM_FI_DEV_GPU_UTIL"].samples[0]
    assert s.labels["pod"] == 'evil"} 1\\n#' and "\x1b" not in s.labels["namespace"]

