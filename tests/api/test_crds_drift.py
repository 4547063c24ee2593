"""crds/ must be exactly what `poolpilot crds` generates from poolpilot.api.types (pure, no cluster)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from poolpilot.api import crdgen

REPO = Path(__file__).resolve().parents[2]
CRDS = REPO / "crds"
REGENERATE = "regenerate with: poolpilot crds --output-dir crds   (then review and commit the diff)"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "poolpilot.cli", "crds", *args],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )


def test_stdout_matches_committed_files() -> None:
    printed = _cli().stdout
    committed = "".join(f"---\n{(CRDS / crdgen.file_name(k)).read_text()}" for k in crdgen.KINDS)
    assert printed == committed, f"crds/ is out of date with poolpilot.api.types; {REGENERATE}"


def test_output_dir_writes_exactly_the_committed_files(tmp_path: Path) -> None:
    _cli("--output-dir", str(tmp_path))
    generated = {p.name: p.read_text() for p in tmp_path.iterdir()}
    committed = {p.name: p.read_text() for p in CRDS.iterdir() if p.suffix in (".yaml", ".yml")}
    assert generated.keys() == committed.keys(), f"files differ: {sorted(generated)} vs {sorted(committed)}"
    for name, text in generated.items():
        assert text == committed[name], f"crds/{name} differs from the generated CRD; {REGENERATE}"


def test_stdout_is_one_crd_document_per_kind() -> None:
    docs = [d for d in yaml.safe_load_all(_cli().stdout) if d is not None]
    assert [d["kind"] for d in docs] == ["CustomResourceDefinition"] * 2
    assert sorted(d["metadata"]["name"] for d in docs) == [
        "gpunodepools.poolpilot.io",
        "inferencepools.poolpilot.io",
    ]


def test_crd_reference_tables_are_current() -> None:
    doc = (REPO / "docs" / "crd-reference.md").read_text()
    start = doc.find(crdgen.REFERENCE_BEGIN)
    end = doc.find(crdgen.REFERENCE_END)
    assert start >= 0 and end > start, "docs/crd-reference.md lost its generated-section markers"
    section = doc[start : end + len(crdgen.REFERENCE_END)]
    assert section == _cli("--reference").stdout, (
        "docs/crd-reference.md field tables are stale; replace the generated section with the output of "
        "`poolpilot crds --reference`"
    )
