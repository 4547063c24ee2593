#!/usr/bin/env bash
# Build the operator image with docker (or podman): bash operator_image/build.sh [IMAGE]
set -euo pipefail
cd "$(dirname "$0")/.."
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml)
revision=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
image="${1:-ghcr.io/poolpilot/poolpilot:$version}"
engine=$(command -v docker || command -v podman || true)
if [[ -z "$engine" ]]; then
  echo "operator_image/build.sh: neither docker nor podman found" >&2
  exit 1
fi
"$engine" build -f operator_image/Dockerfile --build-arg VERSION="$version" --build-arg REVISION="$revision" \
  -t "$image" .
echo "built $image"
