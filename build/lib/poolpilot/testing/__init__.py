"""Test harnesses that start real components (etcd, kube-apiserver, kube-controller-manager, Prometheus)."""
