"""Code trees measured side by side: the farm at another git revision (a detached worktree)
beside this checkout, each run by a driver script in a fresh interpreter with the tree first on
sys.path, the driver's figures read back from its last `RESULT {json}` line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def baseline_tree(ref: str, folder: Path) -> tuple[Path, str]:
    """A checkout of the farm at `ref` (a detached git worktree), and its commit."""
    commit = subprocess.run(["git", "rev-parse", "--short", ref], cwd=ROOT, check=True,
                            capture_output=True, text=True).stdout.strip()
    subprocess.run(["git", "worktree", "add", "--detach", str(folder), commit], cwd=ROOT,
                   check=True, capture_output=True)
    return folder, commit


def remove_tree(folder: Path) -> None:
    """Remove a baseline_tree's worktree."""
    subprocess.run(["git", "worktree", "remove", "--force", str(folder)], cwd=ROOT,
                   capture_output=True)


def run_in_tree(tree: Path, driver: str, *args: str, timeout: float = 3600) -> dict:
    """The figures a driver script printed (its last RESULT line), run on `tree`'s code."""
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONUNBUFFERED": "1"}
    done = subprocess.run([sys.executable, "-c", driver, *args], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=timeout)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"the run in {tree} failed:\n{done.stdout[-3000:]}"
                           f"\n{done.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


@contextmanager
def code_trees(baseline: str | None, folder: Path) -> Iterator[dict[str, tuple[Path, str]]]:
    """{"baseline": (tree, commit)} at `baseline` where given (removed on exit), then
    {"current": (this checkout, "working tree")}: the trees to alternate."""
    trees = {"current": (ROOT, "working tree")}
    if not baseline:
        yield trees
        return
    tree = Path(folder) / "baseline"
    try:
        yield {"baseline": baseline_tree(baseline, tree), **trees}
    finally:
        remove_tree(tree)
