#!/usr/bin/env bash
# The project's test command: setup, static checks (ruff, mypy, import-linter), then the whole pytest suite
# (unit tests, plus tests against a real etcd + kube-apiserver + kube-controller-manager, a real Prometheus,
# and our Triton-protocol executor driven through tritonclient).
set -euo pipefail
cd "$(dirname "$0")/.."
bash hack/setup.sh
export PATH="$PWD/.venv/bin:$PATH"
echo "==> ruff"; ruff check operator tests bench
echo "==> mypy"; mypy
echo "==> import-linter"; lint-imports
echo "==> pytest"; python -m pytest -q "$@"
