"""The measurement core on a real GPU (skipped where there is none)."""

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from farm.gpu import list_devices
from kernels.conv.problem import ConvProblem
from farm.timing import TimingPolicy
from kernels import get_family

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not list_devices(), reason="no GPU on this machine")]

QUICK = TimingPolicy(warmup=2, min_repeats=5, max_repeats=20, budget_ms=50)
SHAPES = [dict(N=2, C=16, K=8, G=1, H=9, W=7, R=3, S=3, pad_h=1, pad_w=1),
          dict(N=1, C=12, K=12, G=12, H=11, W=11, R=5, S=5, stride_h=2, stride_w=2, pad_h=2,
               pad_w=2),
          dict(N=3, C=8, K=12, G=4, H=6, W=8, R=3, S=1, dil_h=2, pad_h=2),
          dict(N=1, C=4, K=4, G=1, H=1, W=1, R=1, S=1)]


@pytest.fixture(scope="module")
def worker():
    from farm.worker import GpuWorker
    return GpuWorker()


def numpy_conv(op, p, a, b):
    """Float64 reference of each direction on NHWGC / GKYXC / NHWGK arrays."""
    x_shape, w_shape = (p.N, p.H, p.W, p.G, p.c_per_group), (p.G, p.k_per_group, p.R, p.S,
                                                              p.c_per_group)
    y_shape = (p.N, p.P, p.Q, p.G, p.k_per_group)
    def taps():
        for r in range(p.R):
            for s in range(p.S):
                for oh in range(p.P):
                    h = oh * p.stride_h - p.pad_h + r * p.dil_h
                    if 0 <= h < p.H:
                        for q in range(p.Q):
                            w = q * p.stride_w - p.pad_w + s * p.dil_w
                            if 0 <= w < p.W:
                                yield r, s, oh, q, h, w
    if op == "conv2d_fwd":
        x, wt, out = a.reshape(x_shape), b.reshape(w_shape), np.zeros(y_shape)
        for r, s, oh, q, h, w in taps():
            out[:, oh, q] += np.einsum("ngc,gkc->ngk", x[:, h, w], wt[:, :, r, s])
    elif op == "conv2d_bwd_data":
        dy, wt, out = a.reshape(y_shape), b.reshape(w_shape), np.zeros(x_shape)
        for r, s, oh, q, h, w in taps():
            out[:, h, w] += np.einsum("ngk,gkc->ngc", dy[:, oh, q], wt[:, :, r, s])
    else:
        x, dy, out = a.reshape(x_shape), b.reshape(y_shape), np.zeros(w_shape)
        for r, s, oh, q, h, w in taps():
            out[:, :, r, s] += np.einsum("ngk,ngc->gkc", dy[:, oh, q], x[:, h, w])
    return out.ravel()


def host_values(worker, ptr, elements, dtype):
    raw = worker.device.copy_from_device(ptr, elements * (4 if dtype == "fp32" else 2))
    if dtype == "fp32":
        return raw.view(np.float32).astype(np.float64)
    if dtype == "fp16":
        return raw.view(np.float16).astype(np.float64)
    return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)


@pytest.mark.parametrize("op", ["conv2d_fwd", "conv2d_bwd_data", "conv2d_bwd_weight"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s.values())))
def test_reference_matches_numpy(worker, op, shape):
    from farm.measure import ProblemBench
    p = ConvProblem(op=op, dtype="bf16", **shape)
    bench = ProblemBench(worker.device, p, worker.support("bf16"), worker.target, worker.cache)
    try:
        a, b = (host_values(worker, bench.pointers[t.name], t.elements, "bf16")
                for t in bench.tensors[:2])
        assert np.abs(a).max() > 0.5 and len(np.unique(a)) > min(10, a.size // 2)  # random
        [output] = bench.outputs
        ref = host_values(worker, bench.references[output.name], output.elements, "fp32")
        expect = numpy_conv(op, p, a, b)
        assert np.allclose(ref, expect, rtol=1e-5, atol=1e-5)
    finally:
        bench.close()


def test_a_far_slower_instance_stops_at_the_early_check(worker):
    from farm.measure import ProblemBench, measure
    family = get_family("conv_naive")
    instance = family.instances("conv2d_fwd", "fp32")[0]
    p = ConvProblem(op="conv2d_fwd", dtype="fp32", N=4, C=32, K=32, G=1, H=28, W=28, R=3, S=3,
                    pad_h=1, pad_w=1)
    module, log = worker.module(instance)
    assert module is not None, log
    bench = ProblemBench(worker.device, p, worker.support("fp32"), worker.target, worker.cache)
    try:
        alone = measure(bench, family, instance, module, QUICK)
        far = measure(bench, family, instance, module, QUICK, best_us=alone.median_us / 3)
        near = measure(bench, family, instance, module, QUICK, best_us=alone.median_us / 1.5)
    finally:
        bench.close()
    assert far.status == near.status == "ok"
    assert far.policy["stop"] == "slower"
    assert near.samples >= QUICK.min_repeats  # 1.5x slower: past the early check
    assert far.samples < near.samples  # 3x slower: stopped at the early check


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("op", ["conv2d_fwd", "conv2d_bwd_data", "conv2d_bwd_weight"])
def test_naive_family_is_verified_and_timed(worker, op, dtype):
    family = get_family("conv_naive")
    for shape in SHAPES:
        p = ConvProblem(op=op, dtype=dtype, **shape)
        results = list(worker.measure_problem(p, family.instances(op, dtype), QUICK))
        for instance, result in results:
            assert result.status == "ok", (instance.name, shape, result.message)
            assert result.samples >= QUICK.min_repeats or result.policy["stop"] == "slower"
            assert 0 < result.min_us <= result.median_us
            assert result.verify_error < 0.01


def test_planted_bugs_are_caught(worker):
    from kernels.testing.faulty import FAMILY
    p = ConvProblem(op="conv2d_fwd", dtype="bf16", N=4, C=32, K=32, G=1, H=14, W=14, R=3, S=3,
                    pad_h=1, pad_w=1)
    chosen = [i for i in FAMILY.instances("conv2d_fwd", "bf16")
              if i.settings["fault"] in (0, 1, 2)]
    results = {i.settings["fault"]: r for i, r in worker.measure_problem(p, chosen, QUICK)}
    assert results[0].status == "ok"
    assert results[1].status == "wrong_result" and "relative L2 error" in results[1].message
    assert results[2].status == "wrong_result" and "1 of" in results[2].message


FAULT_SCRIPT = textwrap.dedent("""
    import sys
    from kernels.conv.problem import ConvProblem
    from farm.timing import TimingPolicy
    from farm.worker import GpuWorker
    from kernels.testing.faulty import FAMILY
    fault = int(sys.argv[1])
    p = ConvProblem(op="conv2d_fwd", dtype="bf16", N=2, C=16, K=16, G=1, H=8, W=8, R=3, S=3)
    instance = [i for i in FAMILY.instances("conv2d_fwd", "bf16") if i.settings["fault"] == fault]
    worker = GpuWorker()
    try:
        for _, result in worker.measure_problem(p, instance, TimingPolicy(timeout_s=3)):
            print("STATUS", result.status, result.message, flush=True)
    except Exception as exc:
        print("RAISED", type(exc).__name__, exc, flush=True)
    import os
    os._exit(0)
""")


@pytest.mark.parametrize("fault, status", [(3, "launch_error"), (4, "timeout")])
def test_fatal_faults_are_recorded_and_a_fresh_process_goes_on(worker, fault, status):
    proc = subprocess.run([sys.executable, "-c", FAULT_SCRIPT, str(fault)], capture_output=True,
                          text=True, timeout=120)
    assert f"STATUS {status}" in proc.stdout, proc.stdout + proc.stderr
    assert "RAISED DeviceLost" in proc.stdout
    # the GPU still serves a fresh process after the faulty one died
    proc = subprocess.run([sys.executable, "-c", FAULT_SCRIPT, "0"], capture_output=True,
                          text=True, timeout=120)
    assert "STATUS ok" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("op", ["conv2d_fwd", "conv2d_bwd_data", "conv2d_bwd_weight"])
def test_vendor_family_is_verified_and_timed(worker, op):
    pytest.importorskip("torch")
    family = get_family("vendor")
    for shape in SHAPES:
        p = ConvProblem(op=op, dtype="bf16", **shape)
        [(instance, result)] = worker.measure_problem(p, family.instances(op, "bf16"), QUICK)
        assert result.status == "ok", (shape, result.message)
        assert result.median_us > 0
