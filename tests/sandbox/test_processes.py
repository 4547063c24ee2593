"""Sandbox children die with their parent: `spawn` (and `tie_to_parent`) on real processes, no cluster.

A throwaway parent process starts a long-lived child the way the sandbox does, prints the child's pid and
waits; the test SIGKILLs the parent (as a killed pytest or `poolpilot sandbox up` would be) and the child
must be gone within seconds.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from poolpilot.sandbox import processes

pytestmark = pytest.mark.skipif(not processes.DIES_WITH_PARENT, reason="PR_SET_PDEATHSIG is Linux only")

OPERATOR_DIR = str(Path(processes.__file__).resolve().parents[2])

SPAWN_FROM_MAIN = """
    from poolpilot.sandbox.processes import spawn
    child = spawn(["sleep", "300"])
    print(child.pid, flush=True)
    time.sleep(300)
"""

SPAWN_FROM_A_THREAD_THAT_ENDS = """
    import threading
    from poolpilot.sandbox.processes import spawn
    pids = []
    worker = threading.Thread(target=lambda: pids.append(spawn(["sleep", "300"]).pid))
    worker.start()
    worker.join()
    print(pids[0], flush=True)
    time.sleep(300)
"""

MULTIPROCESSING_CHILD = """
    import multiprocessing, os
    from poolpilot.sandbox.processes import tie_to_parent

    def child(parent_pid):
        tie_to_parent(parent_pid)
        time.sleep(300)

    if __name__ == "__main__":
        p = multiprocessing.get_context("spawn").Process(target=child, args=(os.getpid(),), daemon=True)
        p.start()
        print(p.pid, flush=True)
        time.sleep(300)
"""


def _gone(pid: int) -> bool:
    """No such process, or a zombie waiting for its (new) parent to reap it: either way not running."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def _wait_gone(pid: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not _gone(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _start_parent(body: str, tmp_path: Path) -> tuple[subprocess.Popen[str], int]:
    script = tmp_path / "parent.py"
    script.write_text("import time\n" + textwrap.dedent(body))
    env = {**os.environ, "PYTHONPATH": OPERATOR_DIR + os.pathsep + os.environ.get("PYTHONPATH", "")}
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
    assert parent.stdout is not None
    line = parent.stdout.readline()
    assert line.strip().isdigit(), f"the parent printed {line!r} (exit code {parent.poll()})"
    return parent, int(line)


def _kill_all(parent: subprocess.Popen[str], child_pid: int) -> None:
    for pid in (parent.pid, child_pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    parent.wait(timeout=10)


@pytest.mark.parametrize("body", [SPAWN_FROM_MAIN, MULTIPROCESSING_CHILD], ids=["spawn", "tie_to_parent"])
def test_a_child_dies_when_its_parent_is_killed(body: str, tmp_path: Path) -> None:
    parent, child_pid = _start_parent(body, tmp_path)
    try:
        time.sleep(0.5)
        assert not _gone(child_pid), "the child should run while its parent lives"
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=10)
        assert _wait_gone(child_pid), f"child {child_pid} outlived its SIGKILLed parent"
    finally:
        _kill_all(parent, child_pid)


def test_a_child_started_from_a_thread_dies_with_that_thread(tmp_path: Path) -> None:
    """Why the sandbox starts children from long-lived threads: Linux signals on the forking thread's exit."""
    parent, child_pid = _start_parent(SPAWN_FROM_A_THREAD_THAT_ENDS, tmp_path)
    try:
        assert _wait_gone(child_pid), "the child outlived the thread that started it"
        assert parent.poll() is None
    finally:
        _kill_all(parent, child_pid)


def test_spawn_keeps_preexec_fn_to_itself() -> None:
    with pytest.raises(TypeError, match="preexec_fn"):
        processes.spawn(["true"], preexec_fn=lambda: None)


def test_without_prctl_spawn_is_a_plain_popen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(processes, "_PRCTL", None)
    assert processes._die_with_parent_hook() is None
    processes.tie_to_parent(-1)  # a no-op: no prctl, no exit
    child = processes.spawn(["true"])
    assert child.wait(timeout=10) == 0
