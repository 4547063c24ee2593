#!/usr/bin/env bash
# Build kwok (Kubernetes WithOut Kubelet) from its Go module into the PoolPilot cache, with the stage
# configuration kwok needs to start (it exits with "no stages found" without one) copied from the same module.
#
# Why a separate `go install` and not the control-plane wrapper module: kwok's own k8s.io requirements would be
# dragged into the wrapper's module graph by MVS and move the Kubernetes build off its pinned versions.
# Output: $CACHE_ROOT/kwok-<version>/bin/kwok and $CACHE_ROOT/kwok-<version>/stages/*.yaml (reused when present).
# Measured on a 2-core machine: ~2 min with the Kubernetes modules already downloaded.
set -euo pipefail
KWOK_VERSION="${KWOK_VERSION:-v0.8.0}"
CACHE_ROOT="${POOLPILOT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/poolpilot}"
ROOT="$CACHE_ROOT/kwok-$KWOK_VERSION"
BIN_DIR="$ROOT/bin"
STAGES="$ROOT/stages"
# The stock stages the sandbox uses: nodes become Ready and keep a heartbeat lease; pods are deleted when asked.
# Pod readiness and completion are ours (poolpilot.sandbox owns them), so kwok's pod-ready stage is not used.
STAGE_FILES=(
  kustomize/stage/node/fast/node-initialize.yaml
  kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml
  kustomize/stage/pod/fast/pod-ready.yaml
  kustomize/stage/pod/fast/pod-complete.yaml
  kustomize/stage/pod/fast/pod-delete.yaml
)
have_all() {
  [[ -x "$BIN_DIR/kwok" ]] || return 1
  for f in "${STAGE_FILES[@]}"; do [[ -f "$STAGES/$(basename "$f")" ]] || return 1; done
}
if have_all; then echo "kwok: reusing $BIN_DIR/kwok"; exit 0; fi

mkdir -p "$ROOT"
exec 9>"$ROOT/.build.lock"
if ! flock -n 9; then echo "kwok: another build holds the lock; waiting"; flock 9; fi
if have_all; then echo "kwok: reusing $BIN_DIR/kwok (built by a concurrent run)"; exit 0; fi
command -v go >/dev/null || { echo "error: go is required to build kwok" >&2; exit 1; }

start=$(date +%s)
mkdir -p "$BIN_DIR" "$STAGES"
LDF="-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v}"
GOBIN="$BIN_DIR" CGO_ENABLED=0 GOWORK=off GOFLAGS=-buildvcs=false \
  go install -trimpath -ldflags "$LDF" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
dl=$(GOWORK=off go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION")
dir=$(sed -n 's/.*"Dir": "\(.*\)".*/\1/p' <<<"$dl")
[[ -d "$dir" ]] || { echo "error: could not locate the sigs.k8s.io/kwok@$KWOK_VERSION module source" >&2; exit 1; }
for f in "${STAGE_FILES[@]}"; do
  [[ -f "$dir/$f" ]] || { echo "error: $f not found in sigs.k8s.io/kwok@$KWOK_VERSION" >&2; exit 1; }
  install -m 0644 "$dir/$f" "$STAGES/$(basename "$f")"
done
echo "kwok: built in $(( $(date +%s) - start )) s"
"$BIN_DIR/kwok" --version 2>&1 || true
