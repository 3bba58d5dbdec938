"""Where the vendor's time goes in a depthwise-separable pair, per network shape (PyTorch on
the GPU, bf16, channels-last): cuDNN's depthwise convolution, the affine and activation, cuDNN's
1x1 convolution, the three as the pair, and the pointwise stage as a plain cuBLAS matrix product
([N*P*Q, M*C] x [M*C, K]). Each part is timed alone with CUDA events, L2 flushed before every
repeat (a read of twice its size) and its launches queued behind a GPU sleep, so that no host
time falls inside the interval; the median of the repeats; with --ours RESULT (a
bench/vs_vendor.py result of the same batch) our best instance's time is set beside them.

Usage: python -m bench.dwsep_parts [--batch 32] [--repeats 30] [--ours FILE] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from bench.common import write_result
from bench.vs_vendor import geomean, shapes
from kernels.dwsep.operator import torch_activation

OP = "dwsep_fwd"


def timed_us(run, flush, repeats: int) -> float:
    """Median time of `run` over `repeats`, L2 flushed before each."""
    import torch

    run()
    times = []
    for _ in range(repeats):
        flush()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        # the GPU sleeps ~1 ms before the start event, so that the part's launches (PyTorch's
        # dispatch takes tens of us) are all queued when it starts: no host time in the interval
        torch.cuda._sleep(2_000_000)
        start.record()
        run()
        stop.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(stop) * 1e3)
    return statistics.median(times)


def parts(p, flush, repeats: int) -> dict[str, float]:
    """The parts' median times in us for one problem, on random inputs."""
    import torch

    f = torch.nn.functional
    dev, dt = "cuda", torch.bfloat16
    x = torch.randn(p.N, p.C, p.H, p.W, device=dev, dtype=dt).to(
        memory_format=torch.channels_last)
    w_dw = torch.randn(p.MC, 1, p.R, p.S, device=dev, dtype=dt) * 0.3
    w_pw = torch.randn(p.K, p.MC, 1, 1, device=dev, dtype=dt) * p.MC ** -0.5
    scale = torch.rand(1, p.MC, 1, 1, device=dev, dtype=dt) + 0.5
    shift = torch.randn(1, p.MC, 1, 1, device=dev, dtype=dt) * 0.1
    bias = torch.randn(p.K, device=dev, dtype=dt) if p.pw_bias else None
    act = torch_activation(p.activation)
    dw = lambda: f.conv2d(x, w_dw, None, stride=p.stride, padding=p.pad, groups=p.C)  # noqa: E731
    d = dw()
    affine = lambda: act(d * scale + shift)  # noqa: E731
    a = affine()
    pw = lambda: f.conv2d(a, w_pw, bias)  # noqa: E731
    pair = lambda: f.conv2d(act(dw() * scale + shift), w_pw, bias)  # noqa: E731
    a2 = a.permute(0, 2, 3, 1).reshape(-1, p.MC)  # channels-last: already [pixels, MC]
    b2 = w_pw.view(p.K, p.MC).t()
    gemm = lambda: a2 @ b2  # noqa: E731
    return {name: timed_us(run, flush, repeats) for name, run in
            (("depthwise", dw), ("affine", affine), ("pointwise", pw), ("pair", pair),
             ("gemm", gemm))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--ours", type=Path, help="a bench/vs_vendor.py result of this batch")
    parser.add_argument("--name", default="dwsep_parts")
    parser.add_argument("--out")
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("no GPU here: this benchmark times PyTorch's parts on a GPU")
    torch.backends.cudnn.benchmark = True
    # L2 flushed by a read of twice its size: the lines it leaves are clean, so the timed part
    # does not pay for writing back a flush's dirty lines
    scratch = torch.ones(torch.cuda.get_device_properties(0).L2_cache_size // 2,
                         dtype=torch.float32, device="cuda")
    flush = lambda: scratch.sum()  # noqa: E731
    ours = {}
    if args.ours:
        for e in json.loads(args.ours.read_text())["figures"]["shapes"]:
            ours[e["problem"]] = e["ours_us"]
    rows, seen = [], set()
    for label, p in shapes(OP, "networks", "bf16", args.batch):
        if p.key in seen:
            continue
        seen.add(p.key)
        t = parts(p, flush, args.repeats)
        pixels = p.N * p.P * p.Q
        row = {"shape": label, "problem": p.label(), **{f"{k}_us": v for k, v in t.items()},
               "pointwise_tflops": 2 * pixels * p.MC * p.K / t["pointwise"] / 1e6,
               "gemm_tflops": 2 * pixels * p.MC * p.K / t["gemm"] / 1e6,
               "ours_us": ours.get(p.label())}
        rows.append(row)
        print(f"{label[:44]:44s} {p.label():44s} dw {t['depthwise']:7.1f} aff "
              f"{t['affine']:7.1f} pw {t['pointwise']:7.1f} pair {t['pair']:7.1f} "
              f"gemm {t['gemm']:7.1f} ({row['gemm_tflops']:5.0f} TFLOP/s)"
              + (f" ours {row['ours_us']:7.1f}" if row["ours_us"] else ""), flush=True)
    share = lambda key: geomean(r[key] / r["pair_us"] for r in rows)  # noqa: E731
    figures = {"batch": args.batch, "repeats": args.repeats, "shapes": rows,
               "geomean_share_of_pair": {k: share(f"{k}_us") for k in
                                         ("depthwise", "affine", "pointwise", "gemm")}}
    if all(r["ours_us"] for r in rows) and rows:
        figures["geomean_ours_over_gemm"] = geomean(r["ours_us"] / r["gemm_us"] for r in rows)
    device = {"gpu_name": torch.cuda.get_device_name(0), "torch": torch.__version__,
              "cudnn": torch.backends.cudnn.version()}
    print(json.dumps(figures["geomean_share_of_pair"]))
    print(f"wrote {write_result(args.name, device, figures, args.out)}")


if __name__ == "__main__":
    main()
