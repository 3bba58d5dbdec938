"""The scripts under jobs/ (stdlib only, run as `python jobs/NAME.py`), imported for tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

JOBS = Path(__file__).resolve().parents[1] / "jobs"


def load_script(module_name: str, file_name: str) -> ModuleType:
    """jobs/`file_name` as a module registered under `module_name`."""
    spec = importlib.util.spec_from_file_location(module_name, JOBS / file_name)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
