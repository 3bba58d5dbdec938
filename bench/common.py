"""What every benchmark writes: its figures with the device, date and command, as JSON."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import shlex
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from time import time_ns

RESULTS = Path(__file__).resolve().parent / "results"


def geomean(values: list[float]) -> float | None:
    """The geometric mean of positive values; None for none."""
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def write_result(name: str, device: dict, figures: dict, out_dir: str | None = None) -> Path:
    payload = {"benchmark": name, "device": device,
               "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
               "command": " ".join(shlex.quote(a) for a in [Path(sys.executable).name,
                                                            *sys.argv]),
               "figures": figures}
    folder = Path(out_dir) if out_dir else RESULTS
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    path.write_text(json.dumps(payload, indent=1, default=str) + "\n")
    return path


def cpu_name() -> str:
    """The processor's model name (Linux), else what the platform says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def write_cpu_result(name: str, note: str, figures: dict, out_dir: str | None = None) -> Path:
    """write_result with this machine's processor and cores as the device; prints the path."""
    path = write_result(name, {"cpu": cpu_name(), "cores": os.cpu_count(), "note": note},
                        figures, out_dir)
    print(f"wrote {path}")
    return path


def recording_parser(doc: str) -> argparse.ArgumentParser:
    """A parser with the arguments of a benchmark over recordings: --recording, --ops, --arch
    and --dtype."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--recording", type=Path, nargs="+", required=True)
    parser.add_argument("--ops", nargs="+", default=["conv2d_fwd"])
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--dtype", default="bf16")
    return parser


@contextmanager
def scratch_databases(kinds: list[str], folder: Path, pg_url: str | None = None
                      ) -> Iterator[dict[str, Callable[[], str]]]:
    """Makers of fresh databases for a benchmark's runs, by kind: `sqlite` (a new file in
    `folder` each time) and `postgresql` (a new database on `pg_url`'s server where given, else
    on a private server started from this machine's PostgreSQL binaries, stopped on exit; left
    out, with a line saying so, where there are none)."""
    make: dict[str, Callable[[], str]] = {}
    if "sqlite" in kinds:
        make["sqlite"] = lambda: f"sqlite:///{folder}/{time_ns()}.db"
    server = None
    if "postgresql" in kinds and pg_url:
        make["postgresql"] = lambda: pg_url
    elif "postgresql" in kinds:
        try:
            from tests.pg_server import PgServer
            server = PgServer()
            server.start()
            make["postgresql"] = server.create_database
        except (ImportError, RuntimeError, OSError) as exc:
            print(f"no PostgreSQL: {exc}")
            server = None
    try:
        yield make
    finally:
        if server is not None:
            server.stop()
