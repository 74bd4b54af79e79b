"""examples/k8s as a cluster admin applies it: every object valid for Kubernetes' own schemas
(kubernetes-validate; the ServiceMonitor against the Prometheus Operator's CRD), wired together
(labels, ports, the priority class, the kubelet socket gputop reads), no API token, and the
capabilities it grants enough for what docs/metrics.md promises: reading another user's
process environment, checked on this machine's kernel with exactly those capabilities."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml")
kubernetes_validate = pytest.importorskip("kubernetes_validate")

from gputop.sources.pod_resources import DEFAULT_SOCKET  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "examples" / "k8s" / "gputop-daemonset.yaml"
CRD = Path(__file__).resolve().parents[1] / "data" / "prometheus-operator" / \
    "monitoring.coreos.com_servicemonitors.yaml"


def objects() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(MANIFEST.read_text(encoding="utf-8")) if d]


def one(kind: str) -> dict[str, Any]:
    found = [d for d in objects() if d["kind"] == kind]
    assert len(found) == 1, kind
    return found[0]


def container() -> dict[str, Any]:
    return one("DaemonSet")["spec"]["template"]["spec"]["containers"][0]  # type: ignore[no-any-return]


@pytest.mark.parametrize("obj", [d for d in objects() if d["kind"] != "ServiceMonitor"],
                         ids=lambda d: d["kind"])
def test_each_object_is_valid_for_kubernetes(obj: dict[str, Any]) -> None:
    # strict: an unknown or misspelt field is an error, as `kubectl apply` would say.
    kubernetes_validate.validate(obj, kubernetes_validate.latest_version(), strict=True)


def _strict(schema: Any) -> Any:
    """The CRD's schema with unknown fields refused, as the API server prunes them."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


def test_the_service_monitor_is_valid_for_the_operators_crd() -> None:
    import jsonschema

    crd = yaml.safe_load(CRD.read_text(encoding="utf-8"))
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    schema = _strict(version["schema"]["openAPIV3Schema"])
    monitor = one("ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    jsonschema.validate({k: v for k, v in monitor.items() if k not in ("apiVersion", "kind")},
                        schema)
    with pytest.raises(jsonschema.ValidationError):  # the check can fail
        jsonschema.validate({"spec": {"selector": {}, "endpoints": [{"prot": "metrics"}]}},
                            schema)


def test_the_objects_find_each_other() -> None:
    ds, svc, monitor = one("DaemonSet"), one("Service"), one("ServiceMonitor")
    pod = ds["spec"]["template"]
    labels = pod["metadata"]["labels"]
    assert ds["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert svc["spec"]["selector"].items() <= labels.items()
    assert monitor["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [svc["metadata"]["namespace"]]
    assert {e["port"] for e in monitor["spec"]["endpoints"]} <= \
        {p["name"] for p in svc["spec"]["ports"]}
    assert {p["targetPort"] for p in svc["spec"]["ports"]} <= \
        {p["name"] for p in container()["ports"]}
    # The target's own pod/namespace/container would rename the GPU series' pod labels.
    relabel = monitor["spec"]["endpoints"][0]["relabelings"]
    assert {"action": "labeldrop", "regex": "pod|namespace|container"} in relabel


def test_the_priority_class_is_its_own_and_works_outside_kube_system() -> None:
    spec = one("DaemonSet")["spec"]["template"]["spec"]
    name = spec["priorityClassName"]
    # system-node-critical and system-cluster-critical are refused outside kube-system.
    assert not name.startswith("system-")
    pc = one("PriorityClass")
    assert pc["metadata"]["name"] == name and pc["preemptionPolicy"] == "Never"
    assert one("DaemonSet")["metadata"]["namespace"] != "kube-system"


def test_no_api_token_is_mounted() -> None:
    spec = one("DaemonSet")["spec"]["template"]["spec"]
    assert spec["automountServiceAccountToken"] is False
    sa = one("ServiceAccount")
    assert sa["metadata"]["name"] == spec["serviceAccountName"]
    assert sa["automountServiceAccountToken"] is False


def test_the_kubelet_socket_gputop_reads_is_mounted() -> None:
    spec = one("DaemonSet")["spec"]["template"]["spec"]
    c = container()
    assert "--kubernetes" in c["args"]
    mounts = {m["name"]: m for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    socket_dir = os.path.dirname(DEFAULT_SOCKET)
    mount = next(m for m in mounts.values() if m["mountPath"] == socket_dir)
    assert volumes[mount["name"]]["hostPath"]["path"] == socket_dir
    assert spec["hostPID"] is True


# ----------------------------------------------------------------------------------------------
# The capabilities, on a real kernel

SETPRIV = shutil.which("setpriv")
needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or SETPRIV is None or sys.platform != "linux",
    reason="needs root and util-linux's setpriv to run with a pod's capabilities")

READ_JOB = textwrap.dedent("""
    import sys
    from gputop.sources.host import read_job
    job = read_job("/proc", int(sys.argv[1]))
    print(job.pod_name if job else "", job.pod_namespace if job else "")
""")


def _pod_name_read_with(capabilities: list[str], pid: int) -> str:
    caps = ",".join(["-all", *(f"+{c.lower()}" for c in capabilities)])
    r = subprocess.run([str(SETPRIV), f"--bounding-set={caps}", "--inh-caps=-all", "--",
                        sys.executable, "-c", READ_JOB, str(pid)],
                       capture_output=True, text=True, timeout=60, check=True)
    return r.stdout.strip()


@needs_root
def test_the_daemonsets_capabilities_read_a_non_root_pods_environment(tmp_path: Path) -> None:
    sc = container()["securityContext"]
    assert sc["runAsUser"] == 0 and sc["capabilities"]["drop"] == ["ALL"]
    granted = sc["capabilities"]["add"]
    # A training process of another user (uid 1000, as a non-root pod runs), with the downward
    # API's variables.
    trainer = subprocess.Popen(
        [str(SETPRIV), "--reuid=1000", "--regid=1000", "--clear-groups", "--", "sleep", "60"],
        env={"POD_NAME": "train-0", "POD_NAMESPACE": "research", "PATH": os.defpath})
    try:
        assert _pod_name_read_with(granted, trainer.pid) == "train-0 research"
        # What the DaemonSet used to grant: the kernel refuses, and the labels were empty.
        assert _pod_name_read_with(["SYS_PTRACE"], trainer.pid) == ""
    finally:
        trainer.kill()
        trainer.wait()
