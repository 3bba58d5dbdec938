"""`farm dashboard` owns its Streamlit server: stopping the command stops the server.

The real command runs as a subprocess on a free port over a temporary SQLite database; once the
port answers HTTP, only the `farm dashboard` process is signalled. Within 10 s the port must
refuse connections and no process of the Streamlit child's group may be left (a zombie, waiting
for a reaper, counts as gone: it holds no socket and runs nothing). SIGTERM and SIGINT are
forwarded by the command; SIGKILL cannot be, and the child dies through PR_SET_PDEATHSIG.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="reads processes from /proc (Linux)")


def _stat(pid: int) -> dict | None:
    """State, parent, process group and start time of `pid` from /proc, or None if gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = raw[raw.rindex(")") + 2:].split()
    return {"state": fields[0], "ppid": int(fields[1]), "pgrp": int(fields[2]),
            "start": int(fields[19])}


def _processes() -> dict[int, dict]:
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (st := _stat(int(entry))) is not None:
            found[int(entry)] = st
    return found


def _running(pid: int, start: int) -> bool:
    st = _stat(pid)
    return st is not None and st["start"] == start and st["state"] != "Z"


def _group_members(pgrp: int) -> list[int]:
    return [pid for pid, st in _processes().items() if st["pgrp"] == pgrp and st["state"] != "Z"]


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _farm_command() -> list[str]:
    script = Path(sys.executable).with_name("farm")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "farm.cli"]


def _default_signals() -> None:  # whatever ignores the test runner inherited, not for `farm`
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL],
                         ids=["SIGTERM", "SIGINT", "SIGKILL"])
def test_signalling_farm_dashboard_stops_its_streamlit_server(tmp_path, sig):
    port = _free_port()
    env = {**os.environ, "FARM_DB_URL": f"sqlite:///{tmp_path / 'farm.db'}",
           "STREAMLIT_SERVER_FILE_WATCHER_TYPE": "none"}
    log = open(tmp_path / "dashboard.log", "w")
    farm = subprocess.Popen([*_farm_command(), "dashboard", "--port", str(port)], env=env,
                            cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT,
                            preexec_fn=_default_signals)
    child = None
    try:
        deadline = time.monotonic() + 90
        while True:
            assert farm.poll() is None, f"farm dashboard exited {farm.returncode}: " \
                                        f"{(tmp_path / 'dashboard.log').read_text()}"
            assert time.monotonic() < deadline, "the dashboard did not answer in 90 s"
            if child is None:
                kids = [pid for pid, st in _processes().items() if st["ppid"] == farm.pid]
                child = (kids[0], _stat(kids[0])) if kids else None
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health",
                                            timeout=2) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                pass
            time.sleep(0.3)
        kids = [pid for pid, st in _processes().items() if st["ppid"] == farm.pid]
        assert len(kids) == 1 and child is not None and child[0] == kids[0], kids
        child_pid, child_stat = child
        assert "streamlit" in Path(f"/proc/{child_pid}/cmdline").read_text()
        assert child_stat["pgrp"] == child_pid != os.getpgid(farm.pid)  # a group of its own

        farm.send_signal(sig)
        assert farm.wait(timeout=10) == -sig  # it ends the way it was told to
        deadline = time.monotonic() + 10
        while _accepts(port) or _running(child_pid, child_stat["start"]) \
                or _group_members(child_pid):
            assert time.monotonic() < deadline, (
                f"10 s after {sig.name}: port accepts={_accepts(port)}, child running="
                f"{_running(child_pid, child_stat['start'])}, group={_group_members(child_pid)}")
            time.sleep(0.1)
    finally:
        if farm.poll() is None:
            farm.kill()
            farm.wait()
        if child is not None and _running(child[0], child[1]["start"]):
            os.killpg(child[0], signal.SIGKILL)
        log.close()


_OWNER = """
import sys
from farm import serve
child = ("import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
         "print('ready', flush=True); time.sleep(120)")
serve.exit_like(serve.run_owned([sys.executable, "-c", child], grace=float(sys.argv[1])))
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_child_that_ignores_the_signal_is_killed_after_the_grace_period(sig):
    owner = subprocess.Popen([sys.executable, "-c", _OWNER, "1.0"], stdout=subprocess.PIPE,
                             text=True, preexec_fn=_default_signals)
    try:
        assert owner.stdout.readline().strip() == "ready"
        (child,) = [pid for pid, st in _processes().items() if st["ppid"] == owner.pid]
        start = _stat(child)["start"]
        began = time.monotonic()
        owner.send_signal(sig)
        assert owner.wait(timeout=10) == -sig
        assert not _running(child, start) and not _group_members(child)
        if sig == signal.SIGTERM:  # ignored: it took the grace period and SIGKILL
            assert time.monotonic() - began >= 0.9
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()


def test_the_exit_status_of_the_server_is_passed_on():
    code = "import sys; from farm import serve; " \
           "serve.exit_like(serve.run_owned([sys.executable, '-c', 'raise SystemExit(3)']))"
    assert subprocess.run([sys.executable, "-c", code], timeout=30).returncode == 3
