#!/usr/bin/env bash
# Fetch the real Cluster API CRDs (MachineDeployment, MachinePool) from the sigs.k8s.io/cluster-api Go module,
# so the clusterAPI node-pool provider is tested against the schema a real management cluster serves.
# Output: $CACHE_ROOT/cluster-api-<version>/crds/*.yaml (reused when present). No Go build: a module download.
set -euo pipefail
CAPI_VERSION="${CAPI_VERSION:-v1.12.0}"
CACHE_ROOT="${POOLPILOT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/poolpilot}"
OUT="$CACHE_ROOT/cluster-api-$CAPI_VERSION/crds"
FILES=(cluster.x-k8s.io_machinedeployments.yaml cluster.x-k8s.io_machinepools.yaml)
have_all() { for f in "${FILES[@]}"; do [[ -f "$OUT/$f" ]] || return 1; done; }
if have_all; then echo "cluster-api CRDs: reusing $OUT"; exit 0; fi
command -v go >/dev/null || { echo "error: go is required to download the Cluster API module" >&2; exit 1; }
dl=$(GOWORK=off GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/cluster-api@$CAPI_VERSION")
dir=$(sed -n 's/.*"Dir": "\(.*\)".*/\1/p' <<<"$dl")
[[ -d "$dir" ]] || { echo "error: could not download sigs.k8s.io/cluster-api@$CAPI_VERSION" >&2; exit 1; }
mkdir -p "$OUT"
for f in "${FILES[@]}"; do install -m 0644 "$dir/config/crd/bases/$f" "$OUT/$f"; done
echo "cluster-api CRDs: $CAPI_VERSION into $OUT"
