"""Check the group-normalization backward kernels on an NVIDIA GPU against NumPy.

    python -m kernels.groupnorm.gpu_check              # everything (a few minutes on an H100)
    python -m kernels.groupnorm.gpu_check --quick      # bf16 only, no 512x512 shapes
    python -m kernels.groupnorm.gpu_check --help       # filters: --family, --dtype, --layout...
    python -m kernels.groupnorm.gpu_check --bench      # also time every instance on 3 shapes

What it does, through the farm's own runtime (farm/gpu/cuda.py: NVRTC, the driver API):
 1. compiles the GPU reference (reference.cu) and every distinct code object of gn_onepass and
    gn_twopass (onepass.cu, twopass.cu) for this GPU (sm_90a on an H100);
 2. for every edge shape below (G=1, C/G=1, G=C, HxW 1x1 / 7x7 / 65x65 / 512x512, N=1, C or C/G
    not a multiple of the vector width...), both layouts and each element type: draws random
    inputs (x = U(-1,1) + 0.5, dy = U(-1,1), gamma = U(0.25,1.75), rounded to the element type;
    mean and rstd computed in float64 from the rounded x, stored as fp32), computes dx, dgamma,
    dbeta with NumPy in float64 (kernels/groupnorm/reference.py), then runs the GPU reference
    and every applicable instance with its outputs and workspace poisoned with NaN, and compares
    all three outputs with NumPy;
 3. prints a table (one line per shape, layout and dtype; every instance with --verbose) and
    exits 0 when everything matched, 1 on any mismatch, crash or compile failure, 2 when it
    could not run at all (no GPU, no cuda-bindings).

Errors: relative L2 = ||out - ref|| / ||ref|| and relative max = max|out - ref| / max|ref|,
within plan.tolerance(dtype, L): 4 x (output rounding + 2^-24 sqrt(L)), L the reduction length
(dx: C/G*H*W; dgamma, dbeta: N*H*W). The GPU reference (fp32 outputs) is held to the fp32
tolerance. For dx the scale is max(||dx||, ||dy * gamma * rstd||) (likewise for the max):
for tiny groups dx is a small part of its terms (for groups of one or two elements, which the
shape record refuses, it is exactly 0 or eps's residue), where no fp32 kernel can match
relative digits of the difference.

Each shape runs in its own process (--in-process turns that off): an illegal address or a
hang (--timeout seconds per shape) is recorded as a CRASH of the instance that was running, and
the shape goes on after it in a new process (GN_CHECK_CRASH=<instance name> simulates one, to
test this checker). The columns: ok / bad / crash counts, n/a
(instances whose applicability rule refused the shape), and the worst error as a fraction of
its tolerance over all instances (1.0 = at the limit) for dx, dgamma and dbeta.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

import numpy as np

from kernels.groupnorm import plan
from kernels.groupnorm.problem import GroupNormProblem
from kernels.groupnorm.reference import groupnorm_bwd, groupnorm_fwd_stats
from kernels.source import load_source

# (N, C, H, W, G, what it covers); each runs in both layouts and every element type.
SHAPES = [
    (2, 64, 7, 7, 1, "G=1"),
    (2, 64, 7, 7, 64, "G=C (C/G=1)"),
    (3, 96, 7, 7, 32, "C/G=3: no vec>1 along C in onepass"),
    (1, 40, 1, 1, 8, "1x1, N=1, C/G=5"),
    (4, 96, 1, 1, 32, "1x1 and C/G=3: the smallest groups (the record refuses 1 and 2)"),
    (2, 128, 65, 65, 32, "65x65 (odd H*W), C/G=4"),
    (1, 36, 65, 65, 6, "N=1, C=36 not a multiple of 8, C/G=6"),
    (1, 32, 512, 512, 8, "512x512, N=1"),
    (2, 16, 512, 512, 1, "512x512, G=1 (4M elements per group)"),
    (8, 256, 28, 28, 32, "typical"),
    (1, 3, 5, 7, 1, "C=3, odd 5x7"),
    (2, 1280, 8, 8, 32, "C/G=40, C/vec over 32 lanes"),
    (1, 2048, 4, 4, 1, "C/G=2048: several rounds of channel slots"),
    (5, 24, 14, 14, 24, "depthwise-like, odd N"),
    (2, 8, 2, 2, 4, "H*W=4"),
    (33, 64, 3, 3, 16, "N=33: sample loop of the dgamma/dbeta reduction"),
    (1, 4096, 1, 3, 4096, "C=G=4096 at 1x3"),
]
BIG = 512 * 512
DTYPES = ("bf16", "fp16", "fp32")
LAYOUT_NAMES = ("nhwc", "nchw")
BENCH_SHAPES = [(32, 256, 56, 56, 32), (16, 512, 64, 64, 32), (8, 1280, 32, 32, 32)]


# Element types ----------------------------------------------------------------------------------
def to_storage(values: np.ndarray, dtype: str) -> np.ndarray:
    """float64 -> the stored bits (uint16 for bf16/fp16 with round-to-nearest-even, float32)."""
    if dtype == "fp32":
        return values.astype(np.float32)
    if dtype == "fp16":
        return values.astype(np.float16).view(np.uint16)
    bits = values.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def from_storage(stored: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "fp32":
        return stored.view(np.float32).astype(np.float64)
    if dtype == "fp16":
        return stored.view(np.float16).astype(np.float64)
    return (stored.view(np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)


# Code objects -----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Instance:
    family: str
    dtype: str
    cfg: tuple  # sorted items

    @property
    def config(self) -> dict:
        return dict(self.cfg)

    @property
    def name(self) -> str:
        return plan.instance_name(self.family, self.dtype, self.config)

    @property
    def source(self) -> str:
        return plan.SOURCES[self.family]

    @property
    def defines(self) -> dict:
        return plan.defines(self.family, self.dtype, self.config)


def code_key(source: str, defines: dict) -> str:
    return hashlib.sha256(json.dumps([source, sorted(defines.items())]).encode()).hexdigest()[:24]


def selected_instances(args) -> list[Instance]:
    out = []
    for family in args.family:
        for dtype in args.dtype:
            for cfg in plan.configs(family, dtype):
                if LAYOUT_NAMES[cfg["layout"]] in args.layout:
                    out.append(Instance(family, dtype, tuple(cfg.items())))
    return out


def compile_everything(args, target: str, folder: Path) -> tuple[dict, list[str]]:
    """Compile the reference per dtype and every distinct code object; write each to `folder`.
    Returns ({key: path}, [failure messages])."""
    from farm.gpu.cuda import NvrtcCompiler

    jobs: dict[str, tuple[str, dict, str]] = {}
    for dtype in args.dtype:
        d = plan.reference_defines(dtype)
        jobs.setdefault(code_key(plan.REFERENCE_SOURCE, d),
                        (plan.REFERENCE_SOURCE, d, f"reference {dtype}"))
    for inst in selected_instances(args):
        jobs.setdefault(code_key(inst.source, inst.defines), (inst.source, inst.defines, inst.name))
    local, made, lock = threading.local(), [], threading.Lock()

    def one(item):
        key, (source, defines, name) = item
        if not hasattr(local, "compiler"):
            local.compiler = NvrtcCompiler()
            with lock:
                made.append(local.compiler)
        return key, name, local.compiler.compile(load_source(source), defines=defines,
                                                 target=target, timeout_s=300)

    start = time.perf_counter()
    paths, failures, spills = {}, [], []
    try:
        with concurrent.futures.ThreadPoolExecutor(max(1, min(8, os.cpu_count() or 1))) as pool:
            for key, name, result in pool.map(one, jobs.items()):
                if not result.ok:
                    failures.append(f"COMPILE FAILED {name}:\n{result.log[-3000:]}")
                    continue
                for entry, res in result.resources.get("kernels", {}).items():
                    if res.get("spill_bytes") or res.get("local_bytes"):
                        spills.append(f"{name} {entry}: {res}")
                path = folder / f"{key}.bin"
                path.write_bytes(result.code)
                paths[key] = str(path)
    finally:
        for compiler in made:
            compiler.close()
    print(f"compiled {len(jobs)} code objects for {target} in {time.perf_counter() - start:.1f} s"
          f"; {len(failures)} failed")
    for line in spills:
        print(f"  note: local memory / spills in {line}")
    return paths, failures


# One shape on the GPU (runs in a child process) -------------------------------------------------
def compare(got, want, scale, dtype, length) -> dict:
    """Errors of `got` against `want`, relative to `scale` = (L2 norm, max abs) to divide by."""
    tol_l2, tol_max = plan.tolerance(dtype, length)
    l2_scale, max_scale = max(scale[0], 1e-300), max(scale[1], 1e-300)
    finite = bool(np.all(np.isfinite(got)))
    diff = np.abs(got - want) if finite else np.array([np.inf])
    rel_l2 = float(np.linalg.norm(diff)) / l2_scale if finite else float("inf")
    rel_max = float(diff.max(initial=0.0)) / max_scale if finite else float("inf")
    worst = max(rel_l2 / tol_l2, rel_max / tol_max)
    out = {"rel_l2": rel_l2, "rel_max": rel_max, "tol_l2": tol_l2, "tol_max": tol_max,
           "ratio": worst, "ok": finite and worst <= 1.0}
    if not finite:
        out["nonfinite"] = int(np.count_nonzero(~np.isfinite(got)))
    elif worst > 1.0:
        bad = np.flatnonzero(diff.reshape(-1) > tol_max * max_scale)
        out["bad"] = int(bad.size)
        out["first_bad"] = bad[:6].tolist()
    return out


def scales(want: dict, x, dy, gamma, mean, rstd, p: GroupNormProblem) -> dict:
    """What each output's errors are relative to: its own L2 norm and max magnitude, except
    where its value is a cancellation of larger terms. dx: max with dy * gamma * rstd (for
    tiny groups dx is a small part of its terms)."""
    N, G, Cg, HW = p.N, p.G, p.Cg, p.HW
    if p.layout == "nhwc":
        dyg = dy.reshape(N, HW, G, Cg).transpose(0, 2, 3, 1)
    else:
        dyg = dy.reshape(N, G, Cg, HW)
    r = rstd.reshape(N, G).astype(np.float64)
    term = np.abs(dyg * gamma.reshape(1, G, Cg, 1) * r[:, :, None, None])
    out = {k: (float(np.linalg.norm(v)), float(np.abs(v).max(initial=0.0)))
           for k, v in want.items()}
    out["dx"] = (max(out["dx"][0], float(np.linalg.norm(term))),
                 max(out["dx"][1], float(term.max(initial=0.0))))
    return out


def emit(kind: str, payload) -> None:
    sys.stdout.write(f"@@{kind} {json.dumps(payload)}\n")
    sys.stdout.flush()


def run_shape(spec: dict) -> None:
    """Child: one shape and layout, every requested dtype; prints @@START / @@RESULT lines."""
    from farm.gpu.cuda import CudaDevice
    from farm.launch import pack_args

    device = CudaDevice(spec.get("ordinal", 0))
    modules: dict[str, object] = {}

    def module(key):
        if key not in modules:
            modules[key] = device.load_module(Path(spec["codes"][key]).read_bytes())
        return modules[key]

    skip = set(spec["skip"])
    N, C, H, W, G = spec["shape"]
    layout = spec["layout"]
    for dtype in spec["dtypes"]:
        p = GroupNormProblem("groupnorm_bwd", N, C, H, W, G, layout, dtype)
        rng = np.random.default_rng(spec["seed"])
        shape = (N, H, W, C) if layout == "nhwc" else (N, C, H, W)
        x_s = to_storage(rng.uniform(-1, 1, shape) + 0.5, dtype)
        dy_s = to_storage(rng.uniform(-1, 1, shape), dtype)
        g_s = to_storage(rng.uniform(0.25, 1.75, C), dtype)
        x, dy, gamma = (from_storage(a, dtype) for a in (x_s, dy_s, g_s))
        mean64, rstd64 = groupnorm_fwd_stats(x, G, 1e-5, layout)
        mean32, rstd32 = mean64.astype(np.float32), rstd64.astype(np.float32)
        want = dict(zip(("dx", "dgamma", "dbeta"),
                        groupnorm_bwd(x, dy, gamma, mean32, rstd32, G, layout)))
        scale = scales(want, x, dy, gamma, mean32, rstd32, p)
        want["dx"] = want["dx"].reshape(-1)
        lengths = plan.reduction_lengths(p)
        esize = x_s.dtype.itemsize
        count = {"dx": p.elements, "dgamma": C, "dbeta": C}
        ptr = {}
        for name, arr in (("x", x_s), ("dy", dy_s), ("gamma", g_s), ("mean", mean32),
                          ("rstd", rstd32)):
            ptr[name] = device.alloc(max(arr.nbytes, 4))
            device.copy_to_device(ptr[name], np.ascontiguousarray(arr).reshape(-1))
        for name in ("dx", "dgamma", "dbeta"):
            ptr[name] = device.alloc(count[name] * esize)
        ws_bytes, ws_ptr = 0, None

        def workspace(nbytes):
            nonlocal ws_bytes, ws_ptr
            if nbytes > ws_bytes:
                if ws_ptr is not None:
                    device.free(ws_ptr)
                ws_ptr, ws_bytes = device.alloc(nbytes), nbytes
            return ws_ptr

        def run(key, launches, pointers, out_dtype, poison_ws, count):
            """Poison the outputs (and workspace) with NaN, launch, read the outputs back."""
            out_esize = 4 if out_dtype == "fp32" else 2
            for name in ("dx", "dgamma", "dbeta"):
                device.memset(pointers[name], 0xFF, count[name] * out_esize)
            if poison_ws:
                device.memset(pointers["workspace"], 0xFF, poison_ws)
            mod = module(key)
            for launch in launches:
                device.launch(device.function(mod, launch.entry), launch.grid, launch.block,
                              launch.shared_bytes, pack_args(launch, pointers))
            device.synchronize()
            outs = {}
            for name in ("dx", "dgamma", "dbeta"):
                raw = device.copy_from_device(pointers[name], count[name] * out_esize)
                outs[name] = from_storage(raw.view(np.float32 if out_esize == 4 else np.uint16),
                                          out_dtype)
            return outs

        # The GPU reference: fp32 outputs.
        ref_ptr = dict(ptr)
        for name in ("dx", "dgamma", "dbeta"):
            ref_ptr[name] = device.alloc(count[name] * 4)
        ref_ptr["workspace"] = device.alloc(plan.reference_workspace_bytes(p))
        tag = f"reference {dtype}"
        if tag not in skip:
            emit("START", {"name": tag, "dtype": dtype})
            start = time.perf_counter()
            got = run(spec["ref_keys"][dtype], plan.reference_launches(p), ref_ptr, "fp32",
                      plan.reference_workspace_bytes(p), count)
            checks = {k: compare(got[k], want[k], scale[k], "fp32", lengths[k]) for k in got}
            emit("RESULT", {"name": tag, "family": "reference", "dtype": dtype,
                            "checks": checks, "seconds": time.perf_counter() - start})
        for name in ("dx", "dgamma", "dbeta"):
            device.free(ref_ptr[name])
        device.free(ref_ptr["workspace"])

        for item in spec["instances"]:
            inst = Instance(item["family"], item["dtype"], tuple(map(tuple, item["cfg"])))
            if (inst.dtype != dtype or inst.name in skip
                    or inst.config["layout"] != plan.LAYOUTS[layout]):
                continue
            reason = plan.applicable(inst.family, inst.config, p, inst.dtype)
            if reason:
                emit("RESULT", {"name": inst.name, "family": inst.family, "dtype": dtype,
                                "na": reason})
                continue
            key = code_key(inst.source, inst.defines)
            if key not in spec["codes"]:
                emit("RESULT", {"name": inst.name, "family": inst.family, "dtype": dtype,
                                "error": "not compiled"})
                continue
            emit("START", {"name": inst.name, "dtype": dtype})
            if os.environ.get("GN_CHECK_CRASH") == inst.name:  # tests the checker's recovery
                os._exit(3)
            need = plan.workspace_bytes(inst.family, inst.config, p)
            pointers = dict(ptr, workspace=workspace(need))
            try:
                got = run(key, plan.launches(inst.family, inst.config, p), pointers, dtype, need,
                          count)
            except Exception as exc:  # a rejected launch leaves the context usable
                emit("RESULT", {"name": inst.name, "family": inst.family, "dtype": dtype,
                                "error": f"{type(exc).__name__}: {exc}"})
                if getattr(exc, "context_lost", False):
                    raise
                continue
            checks = {k: compare(got[k], want[k], scale[k], dtype, lengths[k]) for k in got}
            emit("RESULT", {"name": inst.name, "family": inst.family, "dtype": dtype,
                            "checks": checks})
        for buf in ptr.values():
            device.free(buf)
        if ws_ptr is not None:
            device.free(ws_ptr)
    device.close()
    emit("DONE", {})


# Parent: run every shape in child processes, then report ---------------------------------------
def run_child(spec: dict, timeout: float,
              in_process: bool) -> tuple[list[dict], dict | None, str]:
    """One child run: (results, {name, dtype} of what was running when it died or None, log)."""
    if in_process:
        import contextlib
        import io
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            try:
                run_shape(spec)
            except Exception:  # noqa: BLE001 - reported in the table like a child's crash
                traceback.print_exc(file=buf)
        text, code = buf.getvalue(), 0
    else:
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
            json.dump(spec, fh)
        try:
            proc = subprocess.run([sys.executable, "-m", "kernels.groupnorm.gpu_check",
                                   "--child", fh.name], check=False, capture_output=True,
                                  text=True, timeout=timeout,
                                  cwd=Path(__file__).resolve().parents[2])
            text, code = proc.stdout + proc.stderr, proc.returncode
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            text, code = out + f"\n(killed: no end after {timeout:g} s)", -9
        finally:
            os.unlink(fh.name)
    results, running, done = [], None, False
    for line in text.splitlines():
        if line.startswith("@@START "):
            running = json.loads(line[8:])
        elif line.startswith("@@RESULT "):
            results.append(json.loads(line[9:]))
            running = None
        elif line.startswith("@@DONE"):
            done = True
    log = "\n".join(line for line in text.splitlines() if not line.startswith("@@"))
    if done and code == 0:
        return results, None, log
    how = (f"signal {-code}" if code < 0 else f"exit status {code}" if code else "an exception")
    log = f"the check ended ({how}) while this ran; its last output:\n{log}".rstrip()
    return results, running or {"name": "(before any instance)", "dtype": "?"}, log


def fmt_ratio(value: float | None) -> str:
    return "-" if value is None else ("inf" if value == float("inf") else f"{value:.3f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", nargs="+", default=list(plan.FAMILIES), choices=plan.FAMILIES)
    ap.add_argument("--dtype", nargs="+", default=list(DTYPES), choices=DTYPES)
    ap.add_argument("--layout", nargs="+", default=list(LAYOUT_NAMES), choices=LAYOUT_NAMES)
    ap.add_argument("--shapes", help="comma-separated indices into SHAPES (see --list)")
    ap.add_argument("--quick", action="store_true", help="bf16 only and no 512x512 shapes")
    ap.add_argument("--no-big", action="store_true", help="leave out the 512x512 shapes")
    ap.add_argument("--verbose", "-v", action="store_true", help="a line per instance")
    ap.add_argument("--csv", help="write every result row to this CSV file")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--device", type=int, default=0, help="CUDA device ordinal")
    ap.add_argument("--target", help="NVRTC target (default: the device's, sm_90a for sm_90)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per shape process")
    ap.add_argument("--in-process", action="store_true",
                    help="no child processes (a crash then ends the run)")
    ap.add_argument("--bench", action="store_true",
                    help="after checking, time every instance on the anchor shapes (bf16)")
    ap.add_argument("--list", action="store_true", help="list the shapes and exit")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.child:
        run_shape(json.loads(Path(args.child).read_text()))
        return 0
    if args.list:
        for i, (n, c, h, w, g, what) in enumerate(SHAPES):
            print(f"{i:3d}  N={n} C={c} {h}x{w} G={g}  ({what})")
        return 0
    if args.quick:
        args.dtype, args.no_big = ["bf16"], True
    indices = ([int(i) for i in args.shapes.split(",")] if args.shapes else range(len(SHAPES)))
    shapes = [SHAPES[i] for i in indices
              if not (args.no_big and SHAPES[i][2] * SHAPES[i][3] >= BIG)]

    try:
        from farm.gpu.cuda import list_devices
        devices = list_devices()
    except Exception as exc:  # noqa: BLE001 - no cuda-bindings, no driver, no GPU
        print(f"cannot run: no usable CUDA device here ({type(exc).__name__}: {exc})")
        return 2
    if not devices or args.device >= len(devices):
        print("cannot run: no CUDA device here")
        return 2
    dev = devices[args.device]
    target = args.target or ("sm_90a" if dev["arch"] == "sm_90" else dev["arch"])
    print(f"device {args.device}: {dev['name']} ({dev['arch']}, {dev['sm_count']} SMs); "
          f"target {target}")

    failures: list[str] = []
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="gn_check_") as folder:
        codes, compile_failures = compile_everything(args, target, Path(folder))
        failures += compile_failures
        instances = selected_instances(args)
        ref_keys = {d: code_key(plan.REFERENCE_SOURCE, plan.reference_defines(d))
                    for d in args.dtype}
        inst_items = [{"family": i.family, "dtype": i.dtype, "cfg": list(i.cfg)}
                      for i in instances]
        verified: set[str] = set()
        header = (f"{'shape':<28} {'layout':<5} {'dtype':<5} {'ok':>4} {'bad':>4} {'crash':>5} "
                  f"{'n/a':>4}  {'ref dx/dg/db':<20} {'worst dx':>8} {'dgamma':>8} {'dbeta':>8}"
                  f"  {'s':>5}")
        print(header)
        print("-" * len(header))
        for (N, C, H, W, G, what) in shapes:
            for layout in args.layout:
                label = f"N{N} C{C} {H}x{W} G{G}"
                spec = {"shape": [N, C, H, W, G], "layout": layout, "dtypes": args.dtype,
                        "codes": codes, "ref_keys": ref_keys, "instances": inst_items,
                        "seed": args.seed, "skip": [], "ordinal": args.device}
                results: list[dict] = []
                start = time.perf_counter()
                while True:  # a crash: record it, go on after it in a new process
                    got, crashed, log = run_child(spec, args.timeout, args.in_process)
                    results += got
                    if crashed is None:
                        break
                    lines = log.strip().splitlines()
                    tail = "\n    ".join(lines[:1] + lines[1:][-5:])
                    results.append({"name": crashed["name"], "family": "?",
                                    "dtype": crashed["dtype"], "crash": tail})
                    if crashed["name"] == "(before any instance)" or args.in_process:
                        failures.append(f"{label} {layout}: the check process failed:\n    {tail}")
                        break
                    spec["skip"] = sorted({r["name"] for r in results})
                seconds = time.perf_counter() - start
                for dtype in args.dtype:
                    mine = [r for r in results if r["dtype"] in (dtype, "?")]
                    ok = [r for r in mine if "checks" in r and r["family"] != "reference"
                          and all(c["ok"] for c in r["checks"].values())]
                    bad = [r for r in mine if "checks" in r and r["family"] != "reference"
                           and not all(c["ok"] for c in r["checks"].values())]
                    errs = [r for r in mine if "crash" in r or "error" in r]
                    na = [r for r in mine if "na" in r]
                    ref = next((r for r in mine if r["family"] == "reference"), None)
                    verified.update(r["name"] for r in ok + bad)
                    worst = {k: max((r["checks"][k]["ratio"] for r in ok + bad), default=None)
                             for k in ("dx", "dgamma", "dbeta")}
                    ref_txt = ("/".join(fmt_ratio(ref["checks"][k]["ratio"])
                                        for k in ("dx", "dgamma", "dbeta"))
                               if ref and "checks" in ref else "MISSING")
                    ref_bad = not (ref and "checks" in ref
                                   and all(c["ok"] for c in ref["checks"].values()))
                    flag = "  <-- FAIL" if bad or errs or ref_bad else ""
                    print(f"{label:<28} {layout:<5} {dtype:<5} {len(ok):>4} {len(bad):>4} "
                          f"{len(errs):>5} {len(na):>4}  {ref_txt:<20} "
                          f"{fmt_ratio(worst['dx']):>8} {fmt_ratio(worst['dgamma']):>8} "
                          f"{fmt_ratio(worst['dbeta']):>8}  {seconds:5.1f}{flag}", flush=True)
                    if ref_bad:
                        failures.append(f"{label} {layout} {dtype}: GPU reference: {ref}")
                    for r in bad:
                        worst_out = {k: v for k, v in r["checks"].items() if not v["ok"]}
                        failures.append(f"{label} {layout} {dtype} {r['name']}: "
                                        f"{json.dumps(worst_out)}")
                    for r in errs:
                        failures.append(f"{label} {layout} {dtype} {r['name']}: "
                                        f"{r.get('crash') or r.get('error')}")
                    if args.verbose:
                        for r in mine:
                            if "checks" in r:
                                txt = "  ".join(f"{k} l2 {c['rel_l2']:.2e} max {c['rel_max']:.2e}"
                                                f" ({c['ratio']:.2f})"
                                                for k, c in r["checks"].items())
                                print(f"    {r['name']:<48} {txt}")
                            elif "na" in r:
                                print(f"    {r['name']:<48} n/a: {r['na']}")
                    for r in mine:
                        rows.append({"shape": label, "layout": layout, "dtype": dtype, **r})
        never = sorted(i.name for i in instances if i.name not in verified)
    if args.csv:
        import csv
        with open(args.csv, "w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(["shape", "layout", "dtype", "instance", "status", "output",
                             "rel_l2", "rel_max", "tol_l2", "tol_max", "detail"])
            for r in rows:
                if "checks" in r:
                    for k, c in r["checks"].items():
                        writer.writerow([r["shape"], r["layout"], r["dtype"], r["name"],
                                         "ok" if c["ok"] else "BAD", k, c["rel_l2"], c["rel_max"],
                                         c["tol_l2"], c["tol_max"], ""])
                else:
                    status = "n/a" if "na" in r else "CRASH" if "crash" in r else "ERROR"
                    writer.writerow([r["shape"], r["layout"], r["dtype"], r["name"], status, "",
                                     "", "", "", "", r.get("na") or r.get("crash")
                                     or r.get("error")])
    if never:
        print(f"\nnote: {len(never)} instances never applied to a shape here: "
              f"{', '.join(never[:12])}{' ...' if len(never) > 12 else ''}")
    if args.bench:
        bench(args, target)
    if failures:
        print(f"\n{len(failures)} FAILURES:")
        for line in failures:
            print(f"  {line}")
        return 1
    print("\nall outputs matched")
    return 0


def bench(args, target: str) -> None:
    """Median time of every applicable bf16 instance on the anchor shapes (NHWC and NCHW),
    L2 flushed before each launch; the best per family is printed."""
    from farm.gpu.cuda import CudaDevice, NvrtcCompiler
    from farm.launch import pack_args

    device = CudaDevice(args.device)
    compiler = NvrtcCompiler()
    cache = {}
    start_ev, stop_ev = device.event_create(), device.event_create()
    print("\nbench (bf16, median of 15 launches, L2 flushed before each):")
    try:
        for (N, C, H, W, G) in BENCH_SHAPES:
            for layout in args.layout:
                p = GroupNormProblem("groupnorm_bwd", N, C, H, W, G, layout, "bf16")
                nbytes = p.elements * 2
                ptr = {k: device.alloc(nbytes) for k in ("x", "dy", "dx")}
                for k in ("gamma", "dgamma", "dbeta"):
                    ptr[k] = device.alloc(C * 2)
                for k in ("mean", "rstd"):
                    ptr[k] = device.alloc(N * G * 4)
                rng = np.random.default_rng(0)
                for k in ("x", "dy"):
                    device.copy_to_device(ptr[k],
                                          to_storage(rng.uniform(-1, 1, p.elements), "bf16"))
                device.copy_to_device(ptr["gamma"], to_storage(np.ones(C), "bf16"))
                device.copy_to_device(ptr["mean"], np.zeros(N * G, np.float32))
                device.copy_to_device(ptr["rstd"], np.ones(N * G, np.float32))
                best: dict[str, tuple[float, str]] = {}
                for family in args.family:
                    for cfg in plan.configs(family, "bf16"):
                        if plan.applicable(family, cfg, p, "bf16"):
                            continue
                        d = plan.defines(family, "bf16", cfg)
                        key = code_key(plan.SOURCES[family], d)
                        if key not in cache:
                            res = compiler.compile(load_source(plan.SOURCES[family]), defines=d,
                                                   target=target)
                            cache[key] = device.load_module(res.code) if res.ok else None
                        if cache[key] is None:
                            continue
                        ws = device.alloc(plan.workspace_bytes(family, cfg, p))
                        pointers = dict(ptr, workspace=ws)
                        steps = [(device.function(cache[key], l.entry), l.grid, l.block,
                                  l.shared_bytes, pack_args(l, pointers))
                                 for l in plan.launches(family, cfg, p)]
                        times = []
                        for rep in range(17):
                            device.flush_l2()
                            device.event_record(start_ev)
                            for step in steps:
                                device.launch(*step)
                            device.event_record(stop_ev)
                            times.append(device.event_elapsed_ms(start_ev, stop_ev) * 1000)
                        device.free(ws)
                        t = float(np.median(times[2:]))
                        name = plan.instance_name(family, "bf16", cfg)
                        if args.verbose:
                            print(f"    {p.label():<36} {name:<48} {t:9.1f} us")
                        if family not in best or t < best[family][0]:
                            best[family] = (t, name)
                minimal = 3 * nbytes  # read x, dy; write dx
                for family, (t, name) in best.items():
                    print(f"  {p.label():<36} {family:<11} best {t:8.1f} us "
                          f"({minimal / t / 1e6:.2f} TB/s of x+dy+dx)  {name}")
                for buf in ptr.values():
                    device.free(buf)
    finally:
        compiler.close()
        device.close()


if __name__ == "__main__":
    sys.exit(main())
