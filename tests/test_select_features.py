"""Selection features: every config field of every family is a column, the derived sizes are
the problem's and the descriptors' own, resources give occupancy, and the spec round-trips."""

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels.conv.problem import CONV_OPERATORS, ConvProblem
from farm.select.catalogue import CatalogueEntry, build_catalogue, candidate_families
from farm.select.cexport import c_expression
from farm.select.device import device_info
from farm.select.evaluate import efficiency
from farm.select.features import FeatureSpec, feature_matrix, instance_matrix
from kernels.conv.operator import INTERACTIONS
from kernels.registry import families_for, get_family

SHAPE = dict(N=8, C=96, K=160, G=1, H=27, W=29, R=3, S=3, stride_h=2, stride_w=1, pad_h=1,
             pad_w=0, dil_h=1, dil_w=2)


def spec_for(op):
    return FeatureSpec.build(op, "bf16", device_info("sm_90"))


def features_of(op, shape, entries):
    spec = spec_for(op)
    x = feature_matrix(spec, shape, instance_matrix(spec, entries))
    return spec, [dict(zip(spec.names, row)) for row in x]


@pytest.mark.parametrize("op", CONV_OPERATORS)
def test_every_config_field_of_every_family_is_a_column(op):
    spec = spec_for(op)
    assert len(set(spec.names)) == len(spec.names)
    assert "vendor" not in {f.name for f in candidate_families(op)}
    assert all(e.family != "vendor" for e in build_catalogue(op, "bf16"))
    chosen = candidate_families(op)
    assert {f.name for f in chosen} == {f.name for f in families_for(op) if f.name != "vendor"
                                        and not type(f).__module__.startswith("kernels.testing")}
    for family in chosen:
        for field in family.config_fields(op):
            assert f"cfg.{family.name}.{field}" in spec.names, (family.name, field)
    # a field two families share (vec, block) is two columns: no aliasing
    assert {"cfg.conv_igemm.vec", "cfg.conv_direct.vec"} <= set(spec.names)


def test_derived_sizes_match_the_problem_and_the_descriptor():
    igemm = get_family("conv_igemm")
    for op in CONV_OPERATORS:
        p = ConvProblem(op=op, **SHAPE)
        entries = [CatalogueEntry.of(i) for i in igemm.instances(op, "bf16")]
        spec, rows = features_of(op, p.shape(), entries)
        for entry, f in zip(entries, rows):
            assert (f["P"], f["Q"], f["Cg"], f["Kg"]) == (p.P, p.Q, p.c_per_group, p.k_per_group)
            assert (f["gemm_m"], f["gemm_n"], f["gemm_k"]) == p.gemm
            assert f["flops"] == p.flops and f["bytes"] == p.min_bytes
            c = entry.instance().settings
            assert f["tiles_m"] == math.ceil(p.gemm[0] / c["block_m"])
            assert f["fill_n"] == (p.gemm[1] - (f["tiles_n"] - 1) * c["block_n"]) / c["block_n"]
            assert 0 < f["fill_k"] <= 1
            assert f["threads"] == 32 * c["warps_m"] * c["warps_n"]
            if op == "conv2d_fwd":  # the grid the descriptor launches
                grid = igemm.grid(entry.instance(), p)
                assert f["blocks"] == grid[0] * grid[2]
            assert f["cfg.conv_igemm.block_m"] == c["block_m"]
            assert math.isnan(f["cfg.conv_direct.vec"]) and f["fam.conv_igemm"] == 1.0
            assert math.isnan(f["registers"])  # no resources: shared memory and threads bound
            smem = c["stages"] * (c["block_m"] + c["block_n"]) * c["block_k"] * 2
            assert f["shared_bytes"] == smem
            assert f["occupancy"] == min(228 * 1024 // smem, 2048 // f["threads"], 32)
            assert f["padded_flops"] >= p.flops and f["operand_bytes"] > 0
            assert math.isnan(f["filter_gap"])


def test_occupancy_from_registers_and_shared_memory():
    instance = get_family("conv_igemm").instances("conv2d_fwd", "bf16")[0]  # 256 threads
    entry = CatalogueEntry.of(instance, {"registers": 128, "shared_bytes": 48 * 1024,
                                         "spill_bytes": 0})
    _, (f,) = features_of("conv2d_fwd", SHAPE, [entry])
    # 128 regs x 256 threads = 32768 of 65536 -> 2 blocks; 228 KiB / 48 KiB -> 4 blocks
    assert (f["registers"], f["occupancy"]) == (128, 2)
    assert f["waves"] == f["blocks"] / (132 * 2)
    direct = get_family("conv_direct").instances("conv2d_fwd", "bf16")[0]
    _, (g,) = features_of("conv2d_fwd", SHAPE, [CatalogueEntry.of(direct)])
    assert g["threads"] == direct.settings["block"] and math.isnan(g["tile_m"])
    assert g["Q"] == 25 and g["tiles_q"] == math.ceil(25 / direct.settings["tile_w"])
    fr = direct.settings["fr"]
    assert g["filter"] == fr and g["filter_gap"] == 2 * abs(fr - 3)
    assert math.isnan(g["padded_flops"])


def test_spec_round_trips_and_refuses_another_version():
    spec = spec_for("conv2d_bwd_weight")
    record = spec.record()
    assert FeatureSpec.from_record(record) == spec
    with pytest.raises(ValueError, match="version"):
        FeatureSpec.from_record({**record, "version": 999})


def test_formulas_translate_to_c():
    assert c_expression("cdiv(gemm_m, tile_m)") == "cdiv(v_gemm_m, v_tile_m)"
    assert c_expression("a - (b - 1) * c / d") == (
        "(v_a - (((v_b - 0x1.0000000000000p+0) * v_c) / v_d))")
    for name, formula in INTERACTIONS:
        assert c_expression(formula)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(CONV_OPERATORS), st.integers(1, 64), st.sampled_from([8, 16, 64, 96]),
       st.sampled_from([1, 2, 8]), st.integers(1, 40), st.sampled_from([1, 3, 5]),
       st.sampled_from([1, 2]))
def test_one_shape_broadcast_equals_rows(op, n, c, g, h, r, stride):
    """The selector's path (one shape against every candidate) and the training path (one
    row per pair) give the same numbers."""
    shape = dict(N=n, C=c, K=c, G=g, H=h + r, W=h + r, R=r, S=r, stride_h=stride,
                 stride_w=stride, pad_h=r // 2, pad_w=r // 2, dil_h=1, dil_w=1)
    entries = build_catalogue(op, "bf16")
    spec = spec_for(op)
    table = instance_matrix(spec, entries)
    single = feature_matrix(spec, shape, table)
    rows = feature_matrix(spec, {k: np.full(len(entries), v) for k, v in shape.items()}, table)
    np.testing.assert_array_equal(single, rows)


@pytest.mark.parametrize("op", CONV_OPERATORS)
def test_the_2d_tiled_families_items_are_their_grid(op):
    """conv_dw_tma's items, as the features count them, are the work items its launch walks:
    the tiles of the direction's map times the channel blocks."""
    shape = dict(N=3, C=200, K=200, G=200, H=15, W=13, R=3, S=3, stride_h=1, stride_w=1,
                 pad_h=1, pad_w=1, dil_h=1, dil_w=1)
    problem = ConvProblem(op=op, dtype="bf16", **shape)
    family = get_family("conv_dw_tma_bwd_weight" if op == "conv2d_bwd_weight" else "conv_dw_tma")
    entries = [e for e in build_catalogue(op, "bf16") if e.family == family.name]
    assert entries
    _, rows = features_of(op, shape, entries)
    instances = {i.config: i for i in family.instances(op, "bf16")}
    for entry, row in zip(entries, rows):
        c = dict(entry.config)
        assert row["items"] == family.items(instances[entry.config], problem)
        assert row["channel_fill"] == 200 / (-(-200 // c["ch"]) * c["ch"])
        assert 0 < row["spatial_fill"] <= 1


def test_efficiency_against_the_oracle():
    frame = pd.DataFrame({
        "problem": [0, 0, 0, 0, 1, 1, 1],
        "candidate": [0, 1, 2, 3, 0, 1, 2],
        "status": ["ok", "ok", "wrong_result", "unsupported", "ok", "ok", "ok"],
        "median_us": [10.0, 8.0, None, None, 5.0, 4.0, 20.0],
        "applicable": [True, True, True, False, True, True, True]})
    # problem 0: the inapplicable 3 and the failed 2 rank first; 3 is skipped, 2 scores 0
    result = efficiency(frame, np.array([3.0, 2.0, 1.0, 0.0, 1.0, 2.0, 3.0]))
    assert result.problems == 2 and result.failed_choices == 1
    assert result.mean == pytest.approx((0 + 4 / 5) / 2)
    assert result.top1 == 0 and result.top5 == 1
    assert result.top_k["2"] == pytest.approx((8 / 8 + 4 / 4) / 2)
    perfect = efficiency(frame, np.array([2.0, 1.0, 3.0, 0.0, 2.0, 1.0, 3.0]))
    assert (perfect.mean, perfect.min, perfect.top1) == (1.0, 1.0, 1.0)
