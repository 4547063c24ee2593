#!/usr/bin/env bash
# Pin the operator image's dependencies: install the operator (no extras) into a fresh venv and freeze it
# into operator_image/constraints.txt. Run after changing pyproject's dependencies; commit the result.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$PY" -m venv "$work/venv"
"$work/venv/bin/pip" install -q --upgrade pip
"$work/venv/bin/pip" install -q .
{
  echo "# The operator image's pinned dependencies: hack/lock-operator-image.sh (pip freeze of \`pip install .\`)."
  "$work/venv/bin/pip" freeze --exclude poolpilot --all | grep -v '^\(pip\|setuptools\|wheel\)=='
} > operator_image/constraints.txt
echo "wrote operator_image/constraints.txt ($(grep -vc '^#' operator_image/constraints.txt) pins)"
