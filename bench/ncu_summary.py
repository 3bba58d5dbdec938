"""Nsight Compute's text report, one record per kernel launch: the figures that say where a
kernel stands (time, SM and memory throughput, IPC, registers, occupancy, cycles per issued
instruction and the largest stall ncu names), as JSON under bench/results.

    ncu --clock-control none --section SpeedOfLight --section ComputeWorkloadAnalysis \\
        --section Occupancy --section LaunchStats --section WarpStateStats \\
        --section MemoryWorkloadAnalysis python3 -m bench.profile_pairs ... > run.txt
    python -m bench.ncu_summary run.txt [more.txt ...] --name conv_profile_h100 \\
        [--skip fill_random compare hold]

Launches of the farm's own helpers (input fill, comparison, the timing hold) are left out with
--skip; every other launch is kept, the vendor's candidate algorithms included, in order.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from bench.common import write_result

LAUNCH = re.compile(r"^  (\S.*?) \((\d+), (\d+), (\d+)\)x\((\d+), (\d+), (\d+)\), Context")
UNITS = {"ns": 1e-3, "us": 1.0, "ms": 1e3, "s": 1e6}
FIGURES = {  # field: (pattern, how to read its groups)
    "duration_us": (r"^\s+Duration\s+(\S+)\s+([\d.,]+)$",
                    lambda unit, v: float(v.replace(",", "")) * UNITS[unit]),
    "sm_throughput_pct": (r"^\s+Compute \(SM\) Throughput\s+%\s+([\d.]+)", float),
    "memory_throughput_pct": (r"^\s+Memory Throughput\s+%\s+([\d.]+)", float),
    "dram_throughput_pct": (r"^\s+DRAM Throughput\s+%\s+([\d.]+)", float),
    "ipc_active": (r"^\s+Executed Ipc Active\s+inst/cycle\s+([\d.]+)", float),
    "registers": (r"^\s+Registers Per Thread\s+register/thread\s+(\d+)", int),
    "achieved_occupancy_pct": (r"^\s+Achieved Occupancy\s+%\s+([\d.]+)", float),
    "cycles_per_issue": (r"^\s+Warp Cycles Per Issued Instruction\s+cycle\s+([\d.]+)", float),
}
STALL = re.compile(r"spends ([\d.]+) cycles being stalled (waiting [^.(]*|on [^.(]*)")


def launches(text: str) -> list[dict]:
    """The report's kernel launches with the figures found under each."""
    found: list[dict] = []
    for line in text.splitlines():
        head = LAUNCH.match(line)
        if head:
            grid, block = head.groups()[1:4], head.groups()[4:7]
            found.append({"kernel": head.group(1), "grid": [int(g) for g in grid],
                          "block": [int(b) for b in block]})
            continue
        if not found:
            continue
        current = found[-1]
        for field, (pattern, read) in FIGURES.items():
            if field not in current:
                match = re.search(pattern, line)
                if match:
                    current[field] = read(*match.groups())
        stall = STALL.search(line)
        if stall and "largest_stall" not in current:
            current["largest_stall"] = {"cycles": float(stall.group(1)),
                                        "reason": stall.group(2).strip()}
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="+", type=Path)
    parser.add_argument("--skip", nargs="*", default=["fill_random", "compare", "hold"])
    parser.add_argument("--name", default="ncu_summary")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    figures = {}
    for path in args.reports:
        kept = [k for k in launches(path.read_text()) if k["kernel"] not in args.skip]
        figures[path.name] = kept
        for k in kept:
            print(f"{path.name}: {k['kernel'][:60]:60} {k.get('duration_us', float('nan')):9.2f} "
                  f"us  SM {k.get('sm_throughput_pct', float('nan')):5.1f}%  IPC "
                  f"{k.get('ipc_active', float('nan')):.2f}  regs {k.get('registers', '?')}")
    print(f"wrote {write_result(args.name, {'note': 'parsed from Nsight Compute reports'}, figures, args.out)}")


if __name__ == "__main__":
    main()
