"""The kubelet's pod-resources API, v1: `api.proto` as Kubernetes publishes it and its generated
Python modules (see README.md). Needs the `k8s` extra: grpcio and protobuf."""
