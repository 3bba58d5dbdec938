"""What every benchmark writes: its figures with the device, date and command, as JSON."""

from __future__ import annotations

import datetime as dt
import json
import platform
import shlex
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


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
