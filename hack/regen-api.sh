#!/usr/bin/env bash
# Regenerate everything derived from poolpilot.api: crds/, the chart's copy, docs/crd-reference.md's tables.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
"$PY" -m poolpilot.cli crds --output-dir crds
cp crds/*.yaml charts/poolpilot/files/crds/
"$PY" -m poolpilot.monitoring --chart charts/poolpilot --docs docs   # rules, dashboard, pod scrape config
"$PY" - <<'PYEOF'
import pathlib, subprocess, sys
doc = pathlib.Path("docs/crd-reference.md")
text = doc.read_text()
begin, end = "<!-- BEGIN GENERATED FIELD TABLES", "<!-- END GENERATED FIELD TABLES -->"
i, j = text.index(begin), text.index(end) + len(end)
new = subprocess.run([sys.executable, "-m", "poolpilot.cli", "crds", "--reference"], check=True,
                     capture_output=True, text=True).stdout
doc.write_text(text[:i] + new.rstrip("\n") + "\n" + text[j:].lstrip("\n") if not new.rstrip().endswith(end) else text[:i] + new + text[j:].lstrip("\n"))
PYEOF
echo "regenerated crds/, charts/poolpilot/files/crds/, the chart's rules and dashboard, docs/crd-reference.md"
