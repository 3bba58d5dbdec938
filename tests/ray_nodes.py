"""A Ray cluster of several nodes on this machine, for the multi-node tests and benchmarks: a
head and more nodes, each started by its own `ray start` on loopback, with token authentication
on. Every process of the cluster is found through its session folder, so a node can be killed
alone and the cluster stopped without touching any other Ray on the machine."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _processes() -> dict[int, str]:
    found = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                found[int(pid)] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(
                    b"\0", b" ").decode(errors="replace")
            except OSError:
                pass
    return found


class RayNodes:
    def __init__(self, token: str | None = None) -> None:
        """token: the cluster's authentication token (default: a new one)."""
        self.ray = [sys.executable, "-m", "ray.scripts.scripts"]  # the `ray` command
        self.root = Path(tempfile.mkdtemp(prefix="rn", dir="/tmp"))  # short: socket paths
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.env = {**os.environ, "RAY_AUTH_MODE": "token",
                    "RAY_AUTH_TOKEN": token or secrets.token_hex(32), "RAY_USAGE_STATS_ENABLED": "0"}
        self.nodes: list[str] = []

    def _start(self, *args: str, gpus: int = 0, env: dict[str, str] | None = None) -> None:
        done = subprocess.run([*self.ray, "start", "--node-ip-address=127.0.0.1",
                               f"--num-gpus={gpus}", "--disable-usage-stats", *args],
                              env={**self.env, **(env or {})}, capture_output=True, text=True,
                              timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"ray start {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")

    def start_head(self, cpus: int = 1) -> None:
        self._start("--head", f"--port={self.port}", f"--num-cpus={cpus}",
                    f"--temp-dir={self.root}", "--include-dashboard=false",
                    "--node-name=head")
        self.nodes.append("head")

    def add_node(self, name: str, cpus: int = 1, gpus: int = 0,
                 env: dict[str, str] | None = None) -> None:
        """Another node; `env` for its processes (CUDA_VISIBLE_DEVICES: the GPUs it owns)."""
        self._start(f"--address={self.address}", f"--num-cpus={cpus}", f"--node-name={name}",
                    gpus=gpus, env=env)
        self.nodes.append(name)

    def pids(self) -> dict[int, str]:
        """The cluster's processes (by its session folder) and their command lines."""
        return {pid: cmd for pid, cmd in _processes().items() if str(self.root) in cmd}

    def raylets(self) -> dict[int, dict[str, str]]:
        """The cluster's raylets and their --key=value arguments: processes whose program is
        the raylet binary (others may name its socket, .../sockets/raylet) and that carry a
        node id (not a raylet's child caught between fork and exec)."""
        found = {}
        for pid, cmd in self.pids().items():
            words = cmd.split()
            if words and words[0].endswith("/raylet"):
                args = dict(a.split("=", 1) for a in words if a.startswith("--") and "=" in a)
                if "--node_id" in args:
                    found[pid] = args
        return found

    def raylet(self, name: str) -> int:
        [pid] = [pid for pid, args in self.raylets().items() if args.get("--node-name") == name]
        return pid

    def node_ids(self) -> dict[str, str]:
        """Ray's id of each live node, by name."""
        return {args["--node-name"]: args["--node_id"] for args in self.raylets().values()}

    def kill_node(self, name: str) -> None:
        """SIGKILL a node's raylet: the node dies as a crashed machine would."""
        os.kill(self.raylet(name), signal.SIGKILL)

    def stop(self) -> None:
        for _ in range(3):
            pids = self.pids()
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.5)
        shutil.rmtree(self.root, ignore_errors=True)
