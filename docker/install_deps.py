"""Install the dependencies of pyproject.toml and of some of its extras, without the package
itself, so that an image's dependency layer is rebuilt only when pyproject.toml changes.

    python install_deps.py PYPROJECT EXTRAS [REQUIREMENT...]

EXTRAS is comma-separated (may be empty); each REQUIREMENT is added as is (e.g. a Ray pin).
"""

from __future__ import annotations

import subprocess
import sys
import tomllib


def requirements(pyproject: str, extras: str, more: list[str] = ()) -> list[str]:
    with open(pyproject, "rb") as f:
        project = tomllib.load(f)["project"]
    optional = project.get("optional-dependencies", {})
    wanted = [e.strip() for e in extras.split(",") if e.strip()]
    unknown = sorted(set(wanted) - set(optional))
    if unknown:
        raise SystemExit(f"{pyproject} has no extra {', '.join(unknown)}")
    return [*project["dependencies"], *(r for e in wanted for r in optional[e]), *more]


if __name__ == "__main__":
    path, extras, *more = sys.argv[1:]
    subprocess.check_call([sys.executable, "-m", "pip", "install", *requirements(path, extras, more)])
