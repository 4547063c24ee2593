"""Process helpers shared by every sandbox harness: one ``free_port``, one ``terminate``."""

from __future__ import annotations

import socket
import subprocess


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
