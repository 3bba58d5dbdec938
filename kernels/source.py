"""Kernel sources as single self-contained strings: local includes expanded, then hashed.

A source is named relative to kernels/ ("groupnorm/onepass.cu"), by an absolute path, or as a
package's resource ("my_operator:kernels/scale.cu", a file inside an importable package on
the file system): an operator installed from another package ships its own sources. An
`#include "file"` resolves beside the including file first, then in kernels/, so such a source
may include the farm's common.cuh (element types and conversions)."""

from __future__ import annotations

import functools
import hashlib
import importlib.resources
import re
from pathlib import Path

KERNELS_DIR = Path(__file__).resolve().parent
_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"\s*$', re.MULTILINE)
_RESOURCE = re.compile(r"^([A-Za-z_][\w.]*):(.+)$")


def _expand(path: Path, seen: set[Path]) -> str:
    path = path.resolve()
    if path in seen:
        return ""
    seen.add(path)
    text = path.read_text().replace("#pragma once", "")

    def include(match: re.Match) -> str:
        name = match.group(1)
        target = next((t for t in (path.parent / name, KERNELS_DIR / name) if t.is_file()), None)
        if target is None:
            raise FileNotFoundError(f"{path}: #include \"{name}\" not found")
        return f"// begin {name}\n{_expand(target, seen)}\n// end {name}"

    return _INCLUDE.sub(include, text)


def source_path(name: str) -> Path:
    """The file a source name means: kernels/<name>, an absolute path, or a resource of an
    importable package ("package:relative/path")."""
    resource = _RESOURCE.match(name)
    if resource:
        package, relative = resource.groups()
        path = Path(str(importlib.resources.files(package).joinpath(relative)))
        if not path.is_file():
            raise FileNotFoundError(f"{name}: no file {relative} in package {package} ({path})")
        return path
    return KERNELS_DIR / name  # an absolute name stays as it is


@functools.cache
def load_source(name: str) -> str:
    """The source `name` names (see source_path) with its local includes inlined (each once)."""
    return _expand(source_path(name), set())


def source_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]
