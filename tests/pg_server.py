"""A private PostgreSQL server for the tests, started from the machine's binaries.

The binaries are found through pg_config or /usr/lib/postgresql; as root the server runs as the
postgres user. It listens on a Unix socket in a temporary folder, never on the network.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path


def _bindir() -> Path | None:
    if shutil.which("pg_config"):
        out = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True)
        path = Path(out.stdout.strip())
        if (path / "initdb").exists():
            return path
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


class PgServer:
    def __init__(self) -> None:
        self.bindir = _bindir()
        self.root = Path(tempfile.mkdtemp(prefix="farm-pg-"))
        self.data, self.sock = self.root / "data", self.root / "sock"
        self.as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []

    def _run(self, *args: str) -> None:
        subprocess.run([*self.as_user, *args], check=True, capture_output=True, text=True)

    def start(self) -> str:
        if self.bindir is None:
            raise RuntimeError("no PostgreSQL server binaries (apt-get install postgresql)")
        self.sock.mkdir(parents=True)
        if self.as_user:
            shutil.chown(self.root, "postgres")
            shutil.chown(self.sock, "postgres")
        self._run(str(self.bindir / "initdb"), "-D", str(self.data), "-U", "postgres",
                  "--auth=trust", "--no-sync", "-E", "UTF8")
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-w", "-l",
                  str(self.root / "log"), "-o",
                  f"-k {self.sock} -c listen_addresses='' -c fsync=off -p 54329", "start")
        return self.url("postgres")

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://postgres@/{database}?host={self.sock}&port=54329"

    def create_database(self) -> str:
        import psycopg

        name = f"farm_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(f"host={self.sock} port=54329 user=postgres dbname=postgres",
                             autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        try:
            self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate",
                      "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
