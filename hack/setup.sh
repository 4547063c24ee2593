#!/usr/bin/env bash
# Install everything PoolPilot's tests and local runs need, idempotently:
#   - Debian packages: prometheus (the real server the tests scrape with)
#   - the control-plane binaries (etcd, kube-apiserver, kube-controller-manager, kubectl), built from the
#     Kubernetes Go modules into ~/.cache/poolpilot (reused when present; first build ~15-25 min on 2 cores)
#   - a virtualenv in .venv with poolpilot installed editable plus its test, executor (torch) and sim extras
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '==> %s\n' "$*"; }

# The executor extra pulls torch from PyPI with its CUDA wheels: ~6 GB unpacked, more while pip unpacks.
# Say so up front instead of failing half-installed with pip's "[Errno 28] No space left on device".
need_gb="${POOLPILOT_VENV_MIN_FREE_GB:-9}"
if ! .venv/bin/python -c 'import torch' >/dev/null 2>&1; then
  free_kb=$(df -Pk . | awk 'NR == 2 { print $4 }')
  tmp_free_kb=$(df -Pk "${TMPDIR:-/tmp}" | awk 'NR == 2 { print $4 }')
  if (( free_kb < need_gb * 1024 * 1024 || tmp_free_kb < need_gb * 1024 * 1024 )); then
    echo "setup: installing .venv needs about ${need_gb} GB free (torch with its CUDA wheels);" \
      "free here: $((free_kb / 1024 / 1024)) GB in $(pwd), $((tmp_free_kb / 1024 / 1024)) GB in ${TMPDIR:-/tmp}." \
      "Free some space (old clones, /tmp) or set POOLPILOT_VENV_MIN_FREE_GB to override." >&2
    exit 1
  fi
fi

if ! command -v prometheus >/dev/null 2>&1; then
  log "installing Debian package prometheus"
  export DEBIAN_FRONTEND=noninteractive
  # The package's maintainer scripts would start a system service; we only need the binary.
  policy_rc=/usr/sbin/policy-rc.d
  created_policy=0
  if [[ ! -e $policy_rc ]]; then printf '#!/bin/sh\nexit 101\n' > "$policy_rc"; chmod +x "$policy_rc"; created_policy=1; fi
  apt-get update -qq || true
  apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  if (( created_policy )); then rm -f "$policy_rc"; fi
fi
prom_version=$(prometheus --version 2>&1)   # read whole: `| head -1` under pipefail can die of SIGPIPE
echo "${prom_version%%$'\n'*}"

log "control-plane binaries"
bash hack/build-control-plane.sh
log "kwok"
bash hack/build-kwok.sh
log "helm"
bash hack/build-helm.sh
log "Cluster API CRDs (for the clusterAPI provider's tests)"
bash hack/fetch-capi-crds.sh

PY="${PYTHON:-python3}"
if [[ ! -x .venv/bin/python ]]; then
  log "creating .venv"
  "$PY" -m venv .venv
fi
log "installing poolpilot[test,executor,sim] into .venv"
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e '.[test,executor,sim]'
log "setup done"
