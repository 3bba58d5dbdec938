"""The parts of measuring that need no GPU: statistics, tolerances, arguments, the code cache."""

import ctypes
import math

import pytest

from farm.compile import FolderCache, compile_source
from farm.environment import Environment
from farm.launch import pack_args
from farm.measure import median_ci, summarize
from kernels.conv.problem import ConvProblem
from farm.worker import target_of
from kernels import get_family, operator_spec
from kernels.conv.params import ConvParams, conv_params
from kernels.family import Launch

P = ConvProblem(op="conv2d_fwd", N=2, C=64, K=32, G=4, H=9, W=7, R=3, S=3, stride_h=2,
                stride_w=2, pad_h=1, pad_w=1)


def test_summary_statistics():
    stats = summarize([10.0, 11.0, 10.5, 30.0, 10.2])
    assert median_ci([10.0] * 20) == 0.0
    assert 0 < median_ci(list(range(90, 111))) < 0.1
    assert stats["median_us"] == 10.5 and stats["min_us"] == 10.0 and stats["max_us"] == 30.0
    assert stats["p90_us"] == pytest.approx(22.4)
    assert stats["spread"] == pytest.approx((22.4 - 10.0) / 10.5)


@pytest.mark.parametrize("dtype, floor", [("bf16", 2**-9), ("fp16", 2**-11), ("fp32", 2**-24)])
def test_tolerance_admits_rounding_and_rejects_a_dropped_term(dtype, floor):
    for op in ("conv2d_fwd", "conv2d_bwd_data", "conv2d_bwd_weight"):
        p = ConvProblem(op=op, dtype=dtype, N=32, C=256, K=256, G=1, H=28, W=28, R=3, S=3,
                        pad_h=1, pad_w=1)
        spec = operator_spec(op)
        tol = spec.tolerance(p)
        length = spec.reduction_length(p)
        assert tol.rel_l2 > floor / math.sqrt(3)  # the output's own rounding passes
        assert tol.rel_l2 < 1 / math.sqrt(length) or dtype == "bf16" and length > 10_000
        assert tol.rel_max < 0.05


def test_each_output_has_its_own_tolerance():
    """An operator with several outputs: each is judged by its own element type and reduction
    length (a per-channel sum over N*H*W next to an elementwise output)."""
    from kernels.operator import OperatorSpec, Tensor

    class TwoOutputs(OperatorSpec):
        name, reference_source = "two", "none.cu"

        def tensors(self, p):
            return [Tensor("x", 64, "input"), Tensor("dx", 64, "output"),
                    Tensor("dgamma", 8, "output", dtype="fp32")]

        def reference_launches(self, p):
            return []

        def reduction_length(self, p, output=None):
            return 1 if output in (None, "dx") else 1_000_000

    spec, p = TwoOutputs(), ConvProblem(op="conv2d_fwd", dtype="bf16", N=1, C=8, K=8, G=1, H=8,
                                          W=8, R=1, S=1)
    assert [t.name for t in spec.outputs(p)] == ["dx", "dgamma"] and spec.output(p).name == "dx"
    assert spec.tolerance(p) == spec.tolerance(p, "dx")
    dx, dgamma = spec.tolerance(p, "dx"), spec.tolerance(p, "dgamma")
    assert dx.rel_l2 == pytest.approx(4 * (2**-8 / 2 + 2**-24))  # bf16 rounding
    assert dgamma.rel_l2 == pytest.approx(4 * (2**-22 / 2 + 2**-24 * 1000))  # fp32, long sum
    assert dgamma.rel_l2 < dx.rel_l2


def test_conv_tensors_and_params():
    spec = operator_spec("conv2d_bwd_data")
    assert [(t.name, t.role) for t in spec.tensors(P)] == [("dy", "input"), ("w", "input"),
                                                           ("dx", "output")]
    assert spec.output(P).elements == 2 * 9 * 7 * 64
    params = conv_params(P)
    assert ctypes.sizeof(ConvParams) == 18 * 4
    assert (params.P, params.Q, params.Cg, params.Kg) == (5, 4, 16, 8)


def test_pack_args_resolves_buffers_and_passes_structs_by_value():
    launch = Launch(entry="k", grid=(1, 1, 1), block=(32, 1, 1),
                    args=("x", "y", conv_params(P), 7, 0.5))
    args = pack_args(launch, {"x": 0x1000, "y": 0x2000})
    raw = bytes(args.buffer)
    assert int.from_bytes(raw[0:8], "little") == 0x1000
    assert int.from_bytes(raw[8:16], "little") == 0x2000
    assert raw[16:16 + 72] == bytes(conv_params(P))
    assert len(args.offsets) == 5


def test_instance_identity_and_defines():
    family = get_family("conv_naive")
    a, b = family.instances("conv2d_fwd", "bf16")
    assert a.key != b.key and a.name != b.name
    assert family.instances("conv2d_fwd", "fp16")[0].key != a.key
    assert family.defines(a) == {"FARM_DTYPE": 2, "BLOCK": a.settings["block"]}
    assert a.record()["config"] == {"dtype": "bf16", "block": a.settings["block"]}


def test_code_cache_round_trip(tmp_path):
    family = get_family("conv_naive")
    instance = family.instances("conv2d_fwd", "bf16")[0]
    cache = FolderCache(tmp_path)
    first = compile_source(family.source(), family.defines(instance), "sm_90a", cache)
    assert first.result.ok and not first.cached and first.result.resources["registers"] > 0
    second = compile_source(family.source(), family.defines(instance), "sm_90a", cache)
    assert second.cached and second.result.code == first.result.code
    assert second.result.resources == first.result.resources
    other = compile_source(family.source(), {**family.defines(instance), "BLOCK": 64},
                           "sm_90a", cache)
    assert other.key != first.key
    broken = compile_source("extern \"C\" __global__ void k() { nope; }", {}, "sm_90a", cache)
    assert not broken.result.ok and "nope" in broken.result.log
    assert not (tmp_path / f"{broken.key}.bin").exists()


def test_targets_and_environment_fingerprints():
    assert target_of({"arch": "sm_90"}) == "sm_90a"
    assert target_of({"arch": "gfx90a"}) == "gfx90a"
    env = Environment("H100", "sm_90", 132, "580", "nvrtc 13.0", "13.0", "0.1.0")
    assert env.fingerprint == Environment("H100", "sm_90", 132, "580", "nvrtc 13.0", "13.0",
                                          "0.1.0").fingerprint
    assert env.fingerprint != Environment("H100", "sm_90", 132, "580", "nvrtc 13.0", "13.0",
                                          "0.1.0", replay_of="x").fingerprint
