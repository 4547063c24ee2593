"""Generate charts/poolpilot/README.md from values.yaml's `# --` comments (helm-docs style).

    python hack/chart_readme.py            # write the README
    python hack/chart_readme.py --check    # exit 1 if it is stale (tests/test_chart.py runs the same check)
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

CHART = Path(__file__).resolve().parents[1] / "charts" / "poolpilot"
PIPE = "\\|"
KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_.-]+):(?P<rest>.*)$")


def documented_keys(text: str) -> list[tuple[str, str]]:
    """(dotted key, description) for every key preceded by a `# --` comment, in file order."""
    out: list[tuple[str, str]] = []
    stack: list[tuple[int, str]] = []
    pending: list[str] | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("# --"):
            pending = [stripped[4:].strip()]
            continue
        if stripped.startswith("#") and pending is not None:
            pending.append(stripped[1:].strip())
            continue
        m = KEY.match(line)
        if not m or stripped.startswith("-"):
            pending = None if not stripped else pending
            continue
        indent = len(m["indent"])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, m["key"]))
        if pending is not None:
            out.append((".".join(k for _, k in stack), " ".join(pending)))
            pending = None
    return out


def _lookup(values: dict[str, Any], dotted: str) -> Any:
    node: Any = values
    for part in dotted.split("."):
        node = node[part]
    return node


def _type(value: Any) -> str:
    return {bool: "bool", int: "int", float: "float", str: "string", list: "list", dict: "object"}.get(
        type(value), "null" if value is None else type(value).__name__
    )


def render() -> str:
    text = (CHART / "values.yaml").read_text()
    values = yaml.safe_load(text)
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    rows = []
    for key, desc in documented_keys(text):
        value = _lookup(values, key)
        default = json.dumps(value, separators=(",", ":"))
        rows.append(f"| `{key}` | {_type(value)} | `{default}` | {desc.replace('|', PIPE)} |")
    return "\n".join(
        [
            f"# {chart['name']}",
            "",
            chart["description"],
            "",
            f"Chart version {chart['version']}, app version {chart['appVersion']}, Kubernetes "
            f"`{chart['kubeVersion']}`.",
            "",
            "```sh",
            "helm install poolpilot charts/poolpilot -n poolpilot --create-namespace \\",
            "  --set settings.prometheusURL=http://prometheus-server.monitoring.svc:9090",
            "```",
            "",
            "Operating it: [docs/operations.md](../../docs/operations.md); GitOps: "
            "[docs/gitops.md](../../docs/gitops.md).",
            "",
            "## Values",
            "",
            "Generated from `values.yaml` by `python hack/chart_readme.py` (a test fails when stale).",
            "",
            "| key | type | default | description |",
            "|---|---|---|---|",
            *rows,
            "",
        ]
    )


def main() -> int:
    readme = CHART / "README.md"
    new = render()
    if "--check" in sys.argv[1:]:
        if not readme.exists() or readme.read_text() != new:
            print(f"{readme} is stale: run python hack/chart_readme.py", file=sys.stderr)
            return 1
        return 0
    readme.write_text(new)
    print(f"wrote {readme}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
