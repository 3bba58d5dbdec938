"""Kernel sources as single self-contained strings: local includes expanded, then hashed."""

from __future__ import annotations

import functools
import hashlib
import re
from pathlib import Path

KERNELS_DIR = Path(__file__).resolve().parent
_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"\s*$', re.MULTILINE)


def _expand(path: Path, seen: set[Path]) -> str:
    path = path.resolve()
    if path in seen:
        return ""
    seen.add(path)
    text = path.read_text().replace("#pragma once", "")

    def include(match: re.Match) -> str:
        target = path.parent / match.group(1)
        if not target.is_file():
            raise FileNotFoundError(f"{path}: #include \"{match.group(1)}\" not found")
        return f"// begin {match.group(1)}\n{_expand(target, seen)}\n// end {match.group(1)}"

    return _INCLUDE.sub(include, text)


@functools.cache
def load_source(relative: str) -> str:
    """The source of kernels/<relative> with its local includes inlined (each once)."""
    return _expand(KERNELS_DIR / relative, set())


def source_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]
