"""groupnorm_bwd as an operator of the farm, without a GPU: the shape record (validation and its
messages, fields from CSV text, identity, cost), the operator's tensors, reference, tolerances,
features and synthetic shapes, the gn_onepass and gn_twopass descriptors (instances per element
type, applicability, code objects shared across split_hw, every instance compiled by NVRTC for
sm_90), the sweep specs and the vendor call (on the CPU, where PyTorch is installed)."""

from __future__ import annotations

import ast
import itertools
import math
import os
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from farm.problems import DTYPE_BYTES, ProblemError, problem_from_store
from farm.select.features import INSTANCE
from kernels.conv.problem import ConvProblem
from kernels.groupnorm import plan
from kernels.groupnorm.operator import GroupNormBackward
from kernels.groupnorm.problem import GroupNormProblem
from kernels.operator import tolerance_for
from kernels.registry import families_for, get_family, operator_spec
from kernels.source import load_source

OP = "groupnorm_bwd"
DTYPES = ("bf16", "fp16", "fp32")
ROOT = Path(__file__).resolve().parents[1]
FAMILIES = ("gn_onepass", "gn_twopass")


def gn(N=2, C=64, H=7, W=7, G=32, layout="nhwc", dtype="bf16"):
    return GroupNormProblem(OP, N, C, H, W, G, layout, dtype)


# The shape record --------------------------------------------------------------------------------
@pytest.mark.parametrize("shape, message", [
    (dict(N=0), "N=0 must be at least 1"),
    (dict(C=-8), "C=-8 must be at least 1"),
    (dict(H=0), "H=0 must be at least 1"),
    (dict(G=0), "G=0 must be at least 1"),
    (dict(C=96, G=64), "C=96 is not divisible by G=64"),
    (dict(C=32, G=32, H=1, W=1), "a group of one element normalizes to exactly zero"),
    (dict(C=64, G=32, H=1, W=1), "a group of two elements"),
    (dict(C=8, G=8, H=1, W=2), "C/G * H * W = 2"),
    (dict(H=513, W=512, C=8, G=1, N=1), "H*W=262656 (513x512) is above 262144"),
    (dict(N=1, C=32768, H=256, W=256, G=32), "C*H*W=2147483648 elements, over the 2^31-1"),
    (dict(layout="nhcw"), "unknown layout 'nhcw'; known: nhwc, nchw"),
    (dict(dtype="fp64"), "unknown dtype 'fp64'"),
    (dict(N="two"), "N must be an integer, got 'two'"),
    (dict(W=2.5), "W must be an integer, got 2.5"),
])
def test_record_refuses_with_the_field_and_the_rule(shape, message):
    with pytest.raises(ProblemError) as caught:
        gn(**shape)
    assert message in str(caught.value)


def test_record_refuses_other_operators():
    with pytest.raises(ProblemError, match="unknown operator 'conv2d_fwd'; known: groupnorm_bwd"):
        GroupNormProblem("conv2d_fwd", 1, 8, 2, 2, 4)


def test_record_converts_integral_values_and_allows_big_batches():
    p = gn(N=2.0, C="64", H=np.int64(7))
    assert (p.N, p.C, p.H) == (2, 64, 7) and all(type(v) is int for v in p.geometry())
    big = gn(N=32, C=256, H=512, W=512, G=32)  # the SD VAE decoder: 2^31 elements, 64-bit
    assert big.elements == 2**31 and big.C * big.HW < 2**31


def test_from_fields_reads_csv_text():
    row = {"N": " 8", "C": "320", "H": "64", "W": "64", "G": "32", "network": "sd15_unet",
           "layer": "down_blocks.0.resnets.0.norm1"}
    p = GroupNormProblem.from_fields(OP, "fp16", row)
    assert p == gn(8, 320, 64, 64, 32, "nhwc", "fp16")  # no layout column: channels last
    assert GroupNormProblem.from_fields(OP, "bf16", {**row, "layout": " nchw "}).layout == "nchw"
    assert GroupNormProblem.from_fields(OP, "bf16", {**row, "layout": ""}).layout == "nhwc"
    assert operator_spec(OP).problem("bf16", row) == gn(8, 320, 64, 64, 32)
    with pytest.raises(ProblemError, match="missing field"):
        GroupNormProblem.from_fields(OP, "bf16", {"N": 1, "C": 8, "H": 2, "W": 2})
    with pytest.raises(ProblemError, match="unknown layout 'NCHW'"):
        GroupNormProblem.from_fields(OP, "bf16", {**row, "layout": "NCHW"})
    with pytest.raises(ProblemError, match="G must be an integer"):
        GroupNormProblem.from_fields(OP, "bf16", {**row, "G": "32.5"})


def test_identity_numbers_and_store_round_trip():
    a, b = gn(layout="nhwc"), gn(layout="nchw")
    assert a.shape() == {"N": 2, "C": 64, "H": 7, "W": 7, "G": 32, "layout": "nhwc"}
    assert a.geometry() == b.geometry() == (2, 64, 7, 7, 32)
    assert a.numbers()["layout"] == 0 and b.numbers()["layout"] == 1
    assert [plan.LAYOUTS[v] for v in ("nhwc", "nchw")] == [0, 1]  # the kernels' FARM_LAYOUT
    assert a.key != b.key and a.key != gn(dtype="fp16").key and a.key == gn().key
    assert problem_from_store(OP, "bf16", "nchw", b.shape()) == b
    assert problem_from_store(OP, "bf16", "nchw", {k: v for k, v in b.shape().items()
                                                   if k != "layout"}) == b
    assert a.label() == "N2 C64 7x7 G32 nhwc"


def test_flops_and_bytes():
    p = gn(N=2, C=64, H=7, W=7, G=32, dtype="bf16")
    elements = 2 * 64 * 49
    assert p.elements == elements and p.group_elements == 2 * 49 and p.Cg == 2
    assert p.flops == 7 * elements + 5 * 2 * 64
    # read x, dy, gamma (bf16) and mean, rstd (fp32); write dx, dgamma, dbeta (bf16)
    assert p.min_bytes == 2 * (2 * elements + 64) + 4 * 2 * 2 * 32 + 2 * (elements + 2 * 64)
    assert gn(dtype="fp32").min_bytes == 4 * (3 * elements + 3 * 64) + 8 * 2 * 32


# The operator -------------------------------------------------------------------------------------
def test_registered_with_its_families():
    spec = operator_spec(OP)
    assert isinstance(spec, GroupNormBackward) and spec.problem_type is GroupNormProblem
    assert spec.fields == ("N", "C", "H", "W", "G", "layout")
    assert {f.name for f in families_for(OP)} >= {"gn_onepass", "gn_twopass", "vendor"}
    assert spec.networks_dir == ROOT / "jobs" / "networks" / "groupnorm"
    assert sorted(spec.networks_dir.glob("*_n*.csv"))
    assert spec.generate_order == ("N", "C", "G", "H", "W", "layout")
    assert [spec.shape_class(gn(C=64, G=g)) for g in (1, 32, 64)] == [
        "layer", "grouped", "instance"]


def test_tensors():
    spec, p = operator_spec(OP), gn(N=3, C=40, H=5, W=6, G=8, dtype="fp16")
    tensors = {t.name: t for t in spec.tensors(p)}
    assert list(tensors) == ["x", "dy", "gamma", "mean", "rstd", "dx", "dgamma", "dbeta"]
    assert [t.role for t in tensors.values()] == ["input"] * 5 + ["output"] * 3
    sizes = {"x": 3 * 40 * 30, "dy": 3 * 40 * 30, "gamma": 40, "mean": 24, "rstd": 24,
             "dx": 3 * 40 * 30, "dgamma": 40, "dbeta": 40}
    assert {n: t.elements for n, t in tensors.items()} == sizes
    types = {n: t.element_type(p) for n, t in tensors.items()}
    assert types == {**{n: "fp16" for n in sizes}, "mean": "fp32", "rstd": "fp32"}
    assert spec.output(p).name == "dx"


def test_reference_and_input_launches_name_existing_buffers():
    spec = operator_spec(OP)
    for p in (gn(), gn(N=1, C=8, H=1, W=3, G=1, layout="nchw"), gn(N=5, C=2048, G=2048)):
        names = {t.name for t in spec.tensors(p)} | {"workspace"}
        (stats,) = spec.input_launches(p)
        assert stats.entry == "groupnorm_fwd_stats" and stats.block == (256, 1, 1)
        assert 1 <= stats.grid[0] <= p.N * p.G and stats.args[-1] == pytest.approx(1e-5)
        assert stats.args[:3] == ("x", "mean", "rstd")
        launches = spec.reference_launches(p)
        assert [x.entry for x in launches] == ["groupnorm_bwd_ref_stats", "groupnorm_bwd_ref_dx",
                                               "groupnorm_bwd_ref_dparams"]
        for launch in (stats, *launches):
            assert {a for a in launch.args if isinstance(a, str)} <= names
        assert spec.reference_workspace_bytes(p) == 8 * p.N * p.G
    assert spec.reference_source == "groupnorm/reference.cu"
    assert spec.reference_defines("fp16") == {"FARM_DTYPE": 1, "FARM_REFERENCE": 1}
    text = (ROOT / "kernels" / "groupnorm" / "reference.cu").read_text()
    assert "#define REF_BLOCK 256" in text and plan.REFERENCE_STATS_BLOCK == 256


@pytest.mark.parametrize("dtype", DTYPES)
def test_tolerances_follow_each_outputs_reduction_length(dtype):
    spec, p = operator_spec(OP), gn(N=4, C=96, H=9, W=5, G=32, dtype=dtype)
    lengths = {"dx": 3 * 45, "dgamma": 4 * 45, "dbeta": 4 * 45}
    for output, length in lengths.items():
        assert spec.reduction_length(p, output) == length
    for output in ("dgamma", "dbeta"):
        assert spec.tolerance(p, output) == tolerance_for(dtype, lengths[output])
    assert spec.reduction_length(p) == lengths["dx"]
    # dx: a group's values less their components along 1 and xhat; |dx| ~ sqrt((M-2)/M) of
    # the rounded terms, the limits widen by the inverse
    for q in (p, gn(N=3, C=96, H=1, W=1, G=32, dtype=dtype)):
        m, base = q.group_elements, tolerance_for(dtype, q.group_elements)
        for limit in (spec.tolerance(q), spec.tolerance(q, "dx")):
            assert limit.rel_l2 == pytest.approx(base.rel_l2 * math.sqrt(m / (m - 2)))
            assert limit.rel_max == pytest.approx(base.rel_max * math.sqrt(m / (m - 2)))
    assert spec.tolerance(gn(C=96, H=1, W=1, G=32), "dx").rel_l2 == pytest.approx(
        tolerance_for("bf16", 3).rel_l2 * math.sqrt(3))
    big = gn(N=1, C=16, H=512, W=512, G=1, dtype=dtype)
    assert spec.tolerance(big, "dx").rel_l2 > spec.tolerance(p, "dx").rel_l2


# Synthetic shapes and the toy cost model ----------------------------------------------------------
def test_synthetic_shapes_are_valid_deterministic_and_cover_the_space():
    spec = operator_spec(OP)
    shapes = spec.synthetic_shapes(400, seed=3)
    assert len(shapes) == 400 and shapes == spec.synthetic_shapes(400, seed=3)
    assert shapes != spec.synthetic_shapes(400, seed=4)
    assert len({tuple(s.values()) for s in shapes}) == 400
    problems = [spec.problem("bf16", s) for s in shapes]
    assert {p.layout for p in problems} == {"nhwc", "nchw"}
    assert {p.N for p in problems} == {1, 2, 4, 8, 16, 32}
    assert min(p.C for p in problems) == 32 and max(p.C for p in problems) == 2048
    assert {1, 8, 16, 32} <= {p.G for p in problems}
    assert any(p.G == p.C for p in problems) and any(p.Cg in (2, 4, 8) and p.G != 32
                                                     for p in problems)
    assert min(p.H for p in problems) == 1 and max(p.H for p in problems) == 256
    assert all(p.H == p.W and p.elements <= 2**26 for p in problems)


def test_toy_cost_model_is_finite_and_has_structure():
    spec = operator_spec(OP)
    many_groups, few_groups = gn(N=32, C=512, H=32, W=32, G=32), gn(N=1, C=64, H=256, W=256, G=1)
    best = {}
    for p in (many_groups, few_groups):
        for family in FAMILIES:
            times = [spec.synthetic_us(p, i) for i in get_family(family).instances(OP, "bf16")]
            assert all(math.isfinite(t) and t > 0 for t in times)
            best[p.label(), family] = min(times)
    assert best[many_groups.label(), "gn_onepass"] < best[many_groups.label(), "gn_twopass"]
    assert best[few_groups.label(), "gn_twopass"] < best[few_groups.label(), "gn_onepass"]


# Selection features -------------------------------------------------------------------------------
HELPERS = {"cdiv": lambda a, b: np.ceil(a / b), "fdiv": lambda a, b: np.floor(a / b),
           "vmin": np.minimum, "vmax": np.maximum}
CONSTANTS = {"sm_count": 132.0, "l2_bytes": 50.0 * 2**20, "bandwidth_gbps": 3350.0,
             "peak_tflops": 989.0}


def _arithmetic_only(formula):
    """Only what the C export translates: + - * /, unary minus, the helpers, names, numbers."""
    for node in ast.walk(ast.parse(formula, mode="eval")):
        if isinstance(node, ast.Call):
            assert getattr(node.func, "id", None) in HELPERS, formula
        elif isinstance(node, ast.BinOp):
            assert isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)), formula
        elif isinstance(node, ast.UnaryOp):
            assert isinstance(node.op, ast.USub), formula
        elif isinstance(node, ast.Constant):
            assert isinstance(node.value, (int, float)), formula
        else:
            assert isinstance(node, (ast.Expression, ast.Name, ast.Load, ast.operator,
                                     ast.unaryop)), (formula, ast.dump(node))


def test_feature_formulas_evaluate_for_every_instance():
    spec = operator_spec(OP)
    formulas = (*spec.shape_formulas, *spec.interactions)
    names = [n for n, _ in formulas]
    assert len(set(names)) == len(names)
    assert not set(names) & (set(spec.fields) | set(CONSTANTS) | set(INSTANCE) | {"elem_bytes"})
    for _, formula in formulas:
        _arithmetic_only(formula)
    for p in (gn(), gn(N=1, C=32, H=512, W=512, G=1, layout="nchw", dtype="fp32"),
              gn(N=32, C=2048, H=1, W=1, G=512)):
        values = {k: float(v) for k, v in p.numbers().items()}
        values.update(CONSTANTS, elem_bytes=float(DTYPE_BYTES[p.dtype]))
        for name, formula in spec.shape_formulas:
            values[name] = eval(formula, {"__builtins__": {}, **HELPERS}, values)  # noqa: S307
        assert values["flops"] == p.flops and values["bytes"] == p.min_bytes
        assert values["group_elements"] == p.group_elements and values["groups"] == p.N * p.G
        for family in FAMILIES:
            for instance in get_family(family).instances(OP, p.dtype):
                columns = dict.fromkeys(INSTANCE, math.nan)
                mapped = spec.instance_features(instance.settings)
                assert set(mapped) <= set(INSTANCE) | {"static_shared_bytes"}
                columns.update(mapped, occupancy=2.0)
                row = {**values, **columns}
                for name, formula in spec.interactions:
                    row[name] = eval(formula, {"__builtins__": {}, **HELPERS}, row)  # noqa: S307
                    assert np.isfinite(row[name]), (name, instance.name, p.label())
                if (family == "gn_twopass" and p.layout == "nhwc"
                        and not get_family(family).applicable(instance, p)):
                    assert row["split_blocks"] == math.prod(
                        plan.launches(family, instance.settings, p)[0].grid)


def test_instance_features_map_the_config_fields():
    spec = operator_spec(OP)
    one = next(i for i in get_family("gn_onepass").instances(OP, "bf16")
               if i.settings == {"layout": 0, "threads": 256, "vec": 4, "cpt": 8})
    two = next(i for i in get_family("gn_twopass").instances(OP, "bf16")
               if i.settings == {"layout": 1, "threads": 512, "vec": 2, "split_hw": 16})
    assert spec.instance_features(one.settings) == {
        "threads": 256, "vec": 4, "split": 1, "tile_n": 8,
        "static_shared_bytes": 8 * 256 * 8 + 8 * 256 // 32}
    assert spec.instance_features(two.settings) == {
        "threads": 512, "vec": 2, "split": 16, "static_shared_bytes": 8 * 512 * 2 + 8 * 16}


# The families -------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_instances_exist_only_where_the_dtype_allows_them(dtype):
    for name in FAMILIES:
        family = get_family(name)
        assert family.operators == (OP,) and family.source_file == plan.SOURCES[name]
        instances = family.instances(OP, dtype)
        assert [i.settings for i in instances] == plan.configs(name, dtype)
        assert all(i.settings["vec"] * DTYPE_BYTES[dtype] <= 16 for i in instances)
        names = [i.name for i in instances]
        assert len(set(names)) == len(names) and all(n.startswith(family.short) for n in names)
        assert family.configs("conv2d_fwd") == []
    fields = {k: set(v) for k, v in get_family("gn_twopass").config_fields(OP).items()}
    assert fields == {"layout": {0, 1}, "threads": {128, 256, 512}, "vec": {1, 2, 4, 8},
                      "split_hw": {1, 4, 16, 64}}
    assert set(get_family("gn_onepass").config_fields(OP)) == {"layout", "threads", "vec", "cpt"}


def test_split_hw_is_chosen_at_launch_time_and_shares_the_code_object():
    """The farm's compile cache keys code by family.defines(instance): every split_hw of one
    (layout, threads, vec) maps to the same key."""
    from farm.compile import OPTIONS, cache_key

    class Compiler:
        def version(self):
            return "nvrtc test"

    family = get_family("gn_twopass")
    keys: dict[tuple, set] = {}
    for instance in family.instances(OP, "bf16"):
        assert "FARM_SPLIT_HW" not in family.defines(instance)
        rest = tuple((k, v) for k, v in instance.config if k != "split_hw")
        keys.setdefault(rest, set()).add(cache_key(family.source(), family.defines(instance),
                                                   OPTIONS, Compiler(), "sm_90"))
    assert len(keys) == 2 * 3 * 4 and all(len(k) == 1 for k in keys.values())
    splits = {i.settings["split_hw"]: i for i in family.instances(OP, "bf16")
              if i.settings["layout"] == 0 and i.settings["threads"] == 256
              and i.settings["vec"] == 4}
    p = gn(N=2, C=64, H=16, W=16, G=32)
    grids = {s: family.launches(i, p)[0].grid[1] for s, i in splits.items()}
    assert grids == {1: 1, 4: 4, 16: 16, 64: 64}
    assert family.workspace_bytes(splits[16], p) == (2 * 16 + 3) * 2 * 64 * 4
    one = get_family("gn_onepass").instances(OP, "fp16")[0]
    assert get_family("gn_onepass").defines(one) == {
        "FARM_DTYPE": 1, "FARM_LAYOUT": 0, "FARM_THREADS": 128, "FARM_VEC": 1, "FARM_CPT": 1}


def _instance(family, dtype="bf16", **match):
    return next(i for i in get_family(family).instances(OP, dtype)
                if all(i.settings[k] == v for k, v in match.items()))


def test_applicability():
    one, two = get_family("gn_onepass"), get_family("gn_twopass")
    p = gn(N=2, C=96, H=7, W=7, G=32)  # C/G = 3, H*W = 49
    assert one.applicable(_instance("gn_onepass", vec=1, layout=0), p) is None
    assert "C/G=3 is not a multiple of vec=8" in one.applicable(
        _instance("gn_onepass", vec=8, layout=0), p)
    assert "instance is for nchw, problem is nhwc" in one.applicable(
        _instance("gn_onepass", layout=1), p)
    assert "instance is for fp16, problem is bf16" in one.applicable(
        _instance("gn_onepass", "fp16", layout=0), p)
    assert two.applicable(_instance("gn_twopass", vec=8, layout=0, split_hw=16), p) is None
    assert "split_hw=64 exceeds H*W=49" in two.applicable(
        _instance("gn_twopass", layout=0, split_hw=64), p)
    assert "C=36 is not a multiple of vec=8" in two.applicable(
        _instance("gn_twopass", vec=8, layout=0), gn(N=1, C=36, G=6))
    nchw = gn(N=2, C=96, H=7, W=7, G=32, layout="nchw")
    assert "H*W=49 is not a multiple of vec=2" in two.applicable(
        _instance("gn_twopass", vec=2, layout=1), nchw)
    conv = ConvProblem("conv2d_fwd", 1, 8, 8, 1, 4, 4, 1, 1)
    assert "not conv2d_fwd" in one.applicable(_instance("gn_onepass"), conv)
    # Every shape is served: vec=1 and split_hw=1 take anything in their layout.
    for shape in ((1, 1, 1, 3, 1), (3, 7, 5, 5, 7), (2, 4096, 1, 3, 4096), (1, 8, 512, 512, 2)):
        for layout, dtype in itertools.product(("nhwc", "nchw"), DTYPES):
            q = gn(*shape, layout=layout, dtype=dtype)
            code = plan.LAYOUTS[layout]
            assert one.applicable(_instance("gn_onepass", dtype, vec=1, layout=code), q) is None
            assert two.applicable(_instance("gn_twopass", dtype, vec=1, layout=code,
                                            split_hw=1), q) is None


def test_every_instance_compiles_with_nvrtc_for_sm_90():
    """Every code object of both families in every dtype (instances that differ only in
    split_hw share one) and the reference, through the descriptors; each holds the entries its
    launches name."""
    cuda = pytest.importorskip("farm.gpu.cuda", exc_type=ImportError)
    p = gn(N=2, C=64, H=8, W=8, G=16)
    jobs: dict[tuple, tuple[str, dict, list[str], set[str]]] = {}
    spec = operator_spec(OP)
    for dtype in DTYPES:
        defines = spec.reference_defines(dtype)
        entries = {x.entry for x in (*spec.reference_launches(p), *spec.input_launches(p))}
        jobs[(spec.reference_source, tuple(sorted(defines.items())))] = (
            spec.reference_source, defines, [f"reference {dtype}"], entries)
        for name in FAMILIES:
            family = get_family(name)
            for instance in family.instances(OP, dtype):
                defines = family.defines(instance)
                q = GroupNormProblem(OP, p.N, p.C, p.H, p.W, p.G,
                                     ("nhwc", "nchw")[instance.settings["layout"]], dtype)
                entries = {x.entry for x in family.launches(instance, q)}
                job = jobs.setdefault((family.source_file, tuple(sorted(defines.items()))),
                                      (family.source_file, defines, [], entries))
                job[2].append(instance.name)
    assert len(jobs) == 3 + (35 + 35 + 27) + (24 + 24 + 18)
    local, made, lock = threading.local(), [], threading.Lock()

    def one(job):
        source_file, defines, names, entries = job
        if not hasattr(local, "compiler"):
            local.compiler = cuda.NvrtcCompiler()
            with lock:
                made.append(local.compiler)
        return job, local.compiler.compile(load_source(source_file), defines=defines,
                                           target="sm_90", timeout_s=300)

    try:
        with ThreadPoolExecutor(max(2, min(8, os.cpu_count() or 2))) as pool:
            results = list(pool.map(one, jobs.values()))
    finally:
        for compiler in made:
            compiler.close()
    failures = []
    for (source_file, defines, names, entries), result in results:
        text = load_source(source_file)
        kernels = result.resources.get("kernels") or {}  # where ptxas reported them
        for entry in entries:
            if not re.search(rf'extern "C" __global__[^;{{]*\b{entry}\(', text):
                failures.append(f"{source_file} defines no entry {entry}")
            if kernels and entry not in kernels:
                failures.append(f"{names[0]}: no {entry} in {sorted(kernels)}")
        if not result.ok:
            failures.append(f"{names[0]} {defines}: {result.log[-1500:]}")
    assert not failures, "\n".join(failures[:10])


# Sweep specs --------------------------------------------------------------------------------------
def test_network_spec_loads_every_network_at_three_batch_sizes():
    from farm.specs import load_spec

    resolved = load_spec(ROOT / "jobs" / "examples" / "groupnorm_networks.yaml")
    problems = resolved.problems
    assert resolved.spec.operator == OP and resolved.dropped == 0
    assert all(isinstance(p, GroupNormProblem) and p.dtype == "bf16" for p in problems)
    assert {p.N for p in problems} == {1, 8, 32} and {p.layout for p in problems} == {"nhwc"}
    assert {(p.C, p.H, p.W, p.G) for p in problems if p.N == 1} == {
        (p.C, p.H, p.W, p.G) for p in problems if p.N == 32}
    csv_shapes = set()
    for line in (ROOT / "jobs/networks/groupnorm/all_groupnorm.csv").read_text().splitlines()[1:]:
        N, C, H, W, G = map(int, line.split(",")[:5])
        csv_shapes.add((N, C, H, W, G))
    assert {p.geometry() for p in problems} == csv_shapes


def test_training_spec_loads_synthetic_shapes():
    from farm.specs import load_spec

    resolved = load_spec(ROOT / "jobs" / "training" / "groupnorm_synthetic.yaml")
    assert resolved.spec.operator == OP and resolved.spec.dtype == "bf16"
    assert len(resolved.problems) == 300
    assert {k.family for k in resolved.spec.kernels} == {"gn_onepass", "gn_twopass"}
    assert {p.layout for p in resolved.problems} == {"nhwc", "nchw"}


def test_generate_resolves_groups_and_width_from_earlier_fields(tmp_path):
    from farm.specs import load_spec

    path = tmp_path / "gn.yaml"
    path.write_text("name: gn\noperator: groupnorm_bwd\nproblems:\n"
                    "  - generate: {N: 2, C: [32, 64], G: [C, 8], H: [1, 7], W: H,"
                    " layout: [nhwc, nchw]}\n")
    resolved = load_spec(path)
    shapes = {(p.C, p.G, p.H, p.W, p.layout) for p in resolved.problems}
    # G=C at 1x1 is a group of one element: dropped, in both layouts, for both C
    assert resolved.dropped == 4 and len(shapes) == len(resolved.problems) == 12
    assert (64, 64, 7, 7, "nchw") in shapes and (32, 8, 1, 1, "nhwc") in shapes


# The vendor call (on the CPU: the same arguments as on a GPU) -------------------------------------
@pytest.mark.parametrize("layout", ["nhwc", "nchw"])
def test_vendor_call_matches_numpy(layout):
    torch = pytest.importorskip("torch")
    from kernels.groupnorm.reference import groupnorm_bwd, groupnorm_fwd_stats

    p = gn(N=2, C=12, H=3, W=5, G=4, layout=layout, dtype="fp32")
    shape = (2, 3, 5, 12) if layout == "nhwc" else (2, 12, 3, 5)
    rng = np.random.default_rng(2)
    x, dy, gamma = rng.uniform(-1, 1, shape), rng.uniform(-1, 1, shape), rng.uniform(-1, 1, 12)
    mean, rstd = groupnorm_fwd_stats(x, 4, 1e-5, layout)
    flat = {"x": x, "dy": dy, "gamma": gamma, "mean": mean, "rstd": rstd,
            "dx": np.zeros(x.size), "dgamma": np.zeros(12), "dbeta": np.zeros(12)}
    flat = {k: torch.tensor(np.asarray(v, np.float32).reshape(-1)) for k, v in flat.items()}
    call = operator_spec(OP).vendor_call(p, flat)
    results = call.run()
    for name, tensor in results.items():
        call.outputs[name].copy_(tensor)
    want = groupnorm_bwd(x, dy, gamma, mean.astype(np.float32), rstd.astype(np.float32), 4,
                         layout)
    np.testing.assert_allclose(flat["dx"].numpy(), want[0].reshape(-1), atol=2e-5)
    np.testing.assert_allclose(flat["dgamma"].numpy(), want[1], atol=2e-5)
    np.testing.assert_allclose(flat["dbeta"].numpy(), want[2], atol=2e-5)
