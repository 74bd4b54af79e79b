"""A stand-in for the kubelet's pod-resources gRPC service on a unix socket, for tests.

`FakeKubelet(path, pods)` serves `v1.PodResourcesLister/List` with grpcio's own server and the
generated servicer, answering the `pods` it holds (a test may change them between calls) or, with
`fail` set, an UNAVAILABLE error. Needs the `k8s` extra (grpcio, protobuf).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc

from gputop.sources.podresources_v1 import api_pb2, api_pb2_grpc


@dataclass
class FakeContainer:
    name: str
    devices: dict[str, list[str]] = field(default_factory=dict)  # resource name -> device IDs


@dataclass
class FakePod:
    name: str
    namespace: str
    containers: list[FakeContainer]


def response(pods: Iterable[FakePod]) -> Any:
    return api_pb2.ListPodResourcesResponse(pod_resources=[
        api_pb2.PodResources(name=p.name, namespace=p.namespace, containers=[
            api_pb2.ContainerResources(name=c.name, devices=[
                api_pb2.ContainerDevices(resource_name=r, device_ids=ids)
                for r, ids in c.devices.items()])
            for c in p.containers])
        for p in pods])


class FakeKubelet(api_pb2_grpc.PodResourcesListerServicer):
    def __init__(self, socket_path: str, pods: Sequence[FakePod] = ()) -> None:
        self.socket_path = socket_path
        self.pods = list(pods)
        self.fail = False
        self.calls = 0
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        api_pb2_grpc.add_PodResourcesListerServicer_to_server(self, self._server)
        if not self._server.add_insecure_port(f"unix://{socket_path}"):
            raise OSError(f"cannot listen on {socket_path}")

    def List(self, request: Any, context: Any) -> Any:
        self.calls += 1
        if self.fail:
            context.abort(grpc.StatusCode.UNAVAILABLE, "kubelet is restarting")
        return response(self.pods)

    def __enter__(self) -> FakeKubelet:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop(grace=None)
