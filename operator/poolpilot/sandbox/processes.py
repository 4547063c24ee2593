"""Process helpers shared by every sandbox harness: one ``spawn``, one ``free_port``, one ``terminate``.

`spawn` is how the sandbox starts every long-lived child (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, kwok, Prometheus, executors, the operator): a `subprocess.Popen` whose child gets
`PR_SET_PDEATHSIG` = SIGTERM, so a harness that is killed (pytest or `poolpilot sandbox up` getting SIGKILL,
or SIGTERM with no handler) leaves nothing running. `stop()`/`terminate` remain the orderly way.

Linux delivers the signal when the *thread* that forked the child ends, not only the process: start
children from a thread that outlives them — the main thread (pytest fixtures, the CLI, the demo), the pod
runner's loop thread (it stops its executors when it ends anyway), or an asyncio worker thread (alive as
long as its event loop). Elsewhere than Linux there is no such call: `spawn` is a plain `Popen` and
`DIES_WITH_PARENT` is False.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import Any

_PR_SET_PDEATHSIG = 1
PARENT_DEATH_SIGNAL = signal.SIGTERM


def _resolve_prctl() -> Callable[..., int] | None:
    """libc's prctl, looked up in the parent: the child between fork and exec must not dlopen."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        fn: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return fn


_PRCTL = _resolve_prctl()
DIES_WITH_PARENT = _PRCTL is not None
"""Whether `spawn`'s children get a signal when their parent thread dies (Linux with a libc prctl)."""


def tie_to_parent(parent_pid: int) -> None:
    """In a child: get SIGTERM when the thread that started it dies; exit now if `parent_pid` is gone already.

    `spawn` runs it between fork and exec; a child that is not started by `spawn` (a multiprocessing
    process) calls it first thing. A no-op where prctl is missing.
    """
    if _PRCTL is None:
        return
    _PRCTL(_PR_SET_PDEATHSIG, PARENT_DEATH_SIGNAL)
    if os.getppid() != parent_pid:  # the parent died before prctl: the signal will never come
        os._exit(1)


def _die_with_parent_hook() -> Callable[[], None] | None:
    """`spawn`'s `preexec_fn` (None where prctl is missing, so no hook runs at all)."""
    if _PRCTL is None:
        return None
    parent = os.getpid()
    return lambda: tie_to_parent(parent)


def spawn(args: Sequence[str], **popen_kwargs: Any) -> subprocess.Popen[bytes]:
    """`subprocess.Popen(args, **popen_kwargs)` whose child gets SIGTERM when this thread or process dies.

    Call it from a thread that outlives the child (module docstring). `preexec_fn` is spawn's own.
    """
    if "preexec_fn" in popen_kwargs:
        raise TypeError("spawn sets preexec_fn itself")
    proc: subprocess.Popen[bytes] = subprocess.Popen(
        list(args), preexec_fn=_die_with_parent_hook(), **popen_kwargs
    )
    return proc


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on at `host` right now (the kernel's pick; the usual small race)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def terminate(proc: subprocess.Popen[bytes] | subprocess.Popen[str] | None, grace_s: float = 10) -> None:
    """SIGTERM a child, SIGKILL it if it has not exited after `grace_s`; no-op if gone already."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=grace_s)
