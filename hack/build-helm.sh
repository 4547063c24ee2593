#!/usr/bin/env bash
# Build helm from its Go module (no prebuilt download is reachable here) into the PoolPilot cache; reused when present.
set -euo pipefail
HELM_VERSION="${HELM_VERSION:-v4.3.2}"
CACHE_ROOT="${POOLPILOT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/poolpilot}"
BIN_DIR="$CACHE_ROOT/helm-$HELM_VERSION/bin"
if [[ -x "$BIN_DIR/helm" ]]; then echo "helm: reusing $BIN_DIR/helm"; exit 0; fi
mkdir -p "$BIN_DIR"
start=$(date +%s)
LDF="-s -w -X helm.sh/helm/v4/internal/version.version=$HELM_VERSION -X helm.sh/helm/v4/internal/version.gitTreeState=clean"
GOBIN="$BIN_DIR" CGO_ENABLED=0 GOWORK=off GOFLAGS=-buildvcs=false \
  go install -trimpath -ldflags "$LDF" "helm.sh/helm/v4/cmd/helm@$HELM_VERSION"
echo "helm: built in $(( $(date +%s) - start )) s"
"$BIN_DIR/helm" version
