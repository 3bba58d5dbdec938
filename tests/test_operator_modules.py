"""An operator is one package: outside the convolution operator's package (kernels/conv/) no
code names a convolution's shape fields or record, so the core (specs, store, coordinator,
recording, replay, selection, dashboard, benches) serves every operator alike."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("farm", "dashboard", "bench", "kernels", "migrations", "jobs")
CONV_PACKAGE = ROOT / "kernels" / "conv"
FORBIDDEN = re.compile(r"\b(ConvProblem|ConvOperator|CONV_FIELDS|CONV_OPERATORS|CONV_DEFAULTS|"
                       r"conv_params|pad_h|pad_w|dil_h|dil_w|stride_h|stride_w|c_per_group|"
                       r"k_per_group)\b")
ALLOWED = {
    # a convolution family with planted faults, to prove the farm records faults as data
    "kernels/testing/faulty.py",
    # the schema's history: revision 0001 made one column per convolution field, 0007 folds
    # them into the JSON shape (and its downgrade unfolds them)
    "migrations/versions/0001_initial_schema.py",
    "migrations/versions/0007_problem_shape_json.py",
    # derives the convolution problem sets of jobs/networks from the published architectures
    "jobs/networks.py",
    # times the farm's own overhead on two convolution shapes
    "bench/measure_overhead.py",
}


def test_no_convolution_names_outside_the_convolution_package():
    found = []
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if path.is_relative_to(CONV_PACKAGE) or relative in ALLOWED:
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                match = FORBIDDEN.search(line)
                if match:
                    found.append(f"{relative}:{number}: {match.group(0)}")
    assert not found, "convolution names outside kernels/conv/:\n" + "\n".join(found)


def test_the_allowlist_is_still_needed():
    """An allowed file that no longer names a convolution field leaves the list."""
    stale = [f for f in ALLOWED if not FORBIDDEN.search((ROOT / f).read_text())]
    assert not stale, f"no longer needed in ALLOWED: {stale}"
