"""Run a server (the dashboard's Streamlit) as a child that lives and dies with this process.

The child runs in its own process group, so a terminal's Ctrl-C reaches it once, through us.
SIGTERM, SIGINT and SIGHUP sent to this process are forwarded to the child's group; we wait
for it to exit, escalate to SIGKILL after `grace` seconds, and then end the way we were told
to (by the same signal). On Linux the child also gets SIGKILL when this process dies without
a chance to forward anything (PR_SET_PDEATHSIG), e.g. when it is SIGKILLed itself.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import NoReturn, Sequence

FORWARDED = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGINT", "SIGHUP")
                  if hasattr(signal, name))
_PR_SET_PDEATHSIG = 1


def _die_with_parent():
    """A preexec_fn for Linux: SIGKILL the child when its parent dies (None elsewhere)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:  # resolved here, in the parent: loading a library after fork is not safe
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the request was in place
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


def run_owned(cmd: Sequence[str], env: dict[str, str] | None = None, grace: float = 5.0) -> int:
    """Run `cmd` until it exits. Returns its exit status, or -N when this process received
    signal N (forwarded to the child, which is gone when this returns)."""
    if os.name != "posix":  # no process groups or forwarding: the child shares our console
        with subprocess.Popen(list(cmd), env=env) as proc:
            try:
                return proc.wait()
            except KeyboardInterrupt:
                proc.terminate()
                proc.wait()
                return -int(signal.SIGINT)

    received: list[int] = []
    proc: subprocess.Popen | None = None

    def forward(signum: int, _frame) -> None:
        received.append(signum)
        if proc is not None:
            _signal_group(proc, signum)

    # a signal ignored here (nohup's SIGHUP) stays ignored, by the child too
    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED
                if signal.getsignal(sig) is not signal.SIG_IGN}
    try:
        proc = subprocess.Popen(list(cmd), env=env, process_group=0,
                                preexec_fn=_die_with_parent())
        if received:  # a signal came while the child was being started
            _signal_group(proc, received[0])
        deadline = None
        while not _exited(proc, 0.2):
            if received and deadline is None:
                deadline = time.monotonic() + grace
            if deadline is not None and time.monotonic() > deadline:
                _signal_group(proc, signal.SIGKILL)
                deadline = float("inf")
        if hasattr(os, "waitid"):  # what it left in its group (its pid is not free yet)
            _signal_group(proc, signal.SIGKILL)
        status = proc.wait()
    finally:
        if proc is not None and proc.poll() is None:  # an exception here: never leave it
            _signal_group(proc, signal.SIGKILL)
            proc.wait()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return -received[0] if received else status


def _exited(proc: subprocess.Popen, timeout: float) -> bool:
    """Whether the child has exited, waiting up to `timeout`; it is not reaped, so its pid (the
    group's id) cannot be taken by another process until proc.wait()."""
    if not hasattr(os, "waitid"):
        try:
            proc.wait(timeout=timeout)
            return True
        except subprocess.TimeoutExpired:
            return False
    end = time.monotonic() + timeout
    while True:
        if os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
            return True
        if time.monotonic() >= end:
            return False
        time.sleep(0.02)


def _signal_group(proc: subprocess.Popen, signum: int) -> None:
    try:
        os.killpg(proc.pid, signum)  # the group is the child's own (process_group=0)
    except (ProcessLookupError, PermissionError):
        pass


def exit_like(status: int) -> NoReturn:
    """Exit with `status`; a negative one (killed by signal N) ends this process by signal N,
    as a shell expects of a command that was interrupted or terminated."""
    if status >= 0:
        sys.exit(status)
    signum = -status
    sys.stdout.flush()
    sys.stderr.flush()
    if signum in FORWARDED:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        time.sleep(1)  # the signal is delivered before this returns; this is a fallback
    sys.exit(128 + signum)
