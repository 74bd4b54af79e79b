"""Which pod the kubelet gave each GPU, from the kubelet's pod-resources API, as dcgm-exporter reads
it: one `List` call on the kubelet's unix socket, and of its answer the devices of the resource
`nvidia.com/gpu` (and `nvidia.com/mig-*`), whose IDs the NVIDIA device plugin sets to the GPU's
UUID (the default), its MIG device's UUID, or its index; `::N` after a UUID is a time-sliced
replica of that GPU.

grpcio and protobuf come with the `k8s` extra (`pip install 'gputop-ml[k8s]'`); without them
`PodResources` says so in one line. The rest of this module needs neither.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gputop.errors import GputopError

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
GPU_RESOURCES = ("nvidia.com/gpu",)
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
TIMEOUT_S = 10.0  # dcgm-exporter's connection timeout for the same call


@dataclass(frozen=True, slots=True)
class PodRef:
    """A pod's container that the kubelet gave a device."""

    name: str
    namespace: str
    container: str


def gpu_pods(pod_resources: Iterable[Any],
             resources: Iterable[str] = GPU_RESOURCES) -> dict[str, PodRef]:
    """Device ID -> pod, from a ListPodResourcesResponse's `pod_resources`. A time-sliced device
    (`GPU-...::3`) is also known by its GPU's ID; a GPU shared by several pods keeps the first
    (dcgm-exporter, without its virtual-GPU mode, keeps one too)."""
    wanted = set(resources)
    out: dict[str, PodRef] = {}
    for pod in pod_resources:
        for container in pod.containers:
            ref = PodRef(pod.name, pod.namespace, container.name)
            for device in container.devices:
                name = device.resource_name
                if name not in wanted and not name.startswith(MIG_RESOURCE_PREFIX):
                    continue
                for device_id in device.device_ids:
                    out.setdefault(device_id, ref)
                    base, sep, _ = device_id.partition("::")
                    if sep:
                        out.setdefault(base, ref)
    return out


def pod_of(pods: Mapping[str, PodRef], uuid: object, index: int) -> PodRef | None:
    """The pod a GPU was given, by its UUID or, with the device plugin's index IDs, its index."""
    if not pods:
        return None
    if isinstance(uuid, str) and uuid in pods:
        return pods[uuid]
    return pods.get(str(index))


class PodResources:
    """A client of the kubelet's pod-resources socket. `gpu_pods()` asks it once (blocking, at
    most `timeout` s): call it from the polling thread, never per scrape."""

    def __init__(self, socket: str = DEFAULT_SOCKET, *, timeout: float = TIMEOUT_S,
                 resources: Iterable[str] = GPU_RESOURCES) -> None:
        try:
            import grpc

            from gputop.sources.podresources_v1 import api_pb2, api_pb2_grpc
        except ImportError as e:
            raise GputopError(f"pod labels need grpcio and protobuf ({e})",
                              hint="pip install 'gputop-ml[k8s]'") from None
        self.socket = socket
        self.timeout = timeout
        self.resources = tuple(resources)
        self._grpc = grpc
        self._request = api_pb2.ListPodResourcesRequest
        self._channel = grpc.insecure_channel(f"unix:{os.path.abspath(socket)}")
        self._stub = api_pb2_grpc.PodResourcesListerStub(self._channel)

    def gpu_pods(self) -> dict[str, PodRef]:
        try:
            answer = self._stub.List(self._request(), timeout=self.timeout)
        except self._grpc.RpcError as e:
            code = e.code() if hasattr(e, "code") else None
            detail = e.details() if hasattr(e, "details") else ""
            why = f"{code.name if code is not None else 'error'}: {detail or e}"
            raise GputopError(f"the kubelet's pod-resources socket {self.socket} did not answer "
                              f"({why})") from None
        return gpu_pods(answer.pod_resources, self.resources)

    def close(self) -> None:
        self._channel.close()
