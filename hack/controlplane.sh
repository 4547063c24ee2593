#!/usr/bin/env bash
# Thin wrapper around the Python harness, for humans and the local sandbox:
#   hack/controlplane.sh up [--dir D]   start etcd + kube-apiserver + kube-controller-manager (foreground)
#   hack/controlplane.sh build          only make sure the binaries exist (hack/build-control-plane.sh)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="$root/operator${PYTHONPATH:+:$PYTHONPATH}"
exec "${PYTHON:-python3}" -m poolpilot.sandbox.controlplane "$@"
