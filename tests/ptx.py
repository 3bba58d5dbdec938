"""A kernel instance's PTX from NVRTC (compute_90a), for tests that read what an entry
compiles to; no GPU needed."""

from __future__ import annotations

import re
from typing import Any

from farm.gpu.cuda import NvrtcCompiler, nvrtc


def ptx_of(family: Any, instance: Any, entry: str) -> str:
    """The PTX of `entry` (from its .entry line to the next) in `instance`'s code."""
    options = [o.replace("sm_90a", "compute_90a") for o in NvrtcCompiler().base_options("sm_90a")
               if not o.startswith("--ptxas")]
    options += [f"-D{k}={v}" for k, v in family.defines(instance).items()]
    prog = nvrtc.nvrtcCreateProgram(family.source().encode(), b"kernel.cu", 0, [], [])[1]
    try:
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(options), [o.encode() for o in options])
        assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS, f"{instance.name} does not compile"
        size = nvrtc.nvrtcGetPTXSize(prog)[1]
        text = b" " * size
        nvrtc.nvrtcGetPTX(prog, text)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    ptx = text.rstrip(b"\0 ").decode()
    parts = re.split(r"(?=\.visible \.entry )", ptx)
    found = [p for p in parts if p.startswith(f".visible .entry {entry}(")]
    assert found, f"no entry {entry} in {instance.name}'s PTX"
    return found[0]
