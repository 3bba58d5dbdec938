"""The generated shape spaces a spec draws from: the convolutions' coverage (wider than the
training space) and stages (layers as networks stack them), and a spec that names a space the
operator lacks."""

from __future__ import annotations

import statistics

import pytest
import yaml

from farm.specs import SpecError, load_spec
from kernels.conv.synthetic import coverage_shapes, stage_shapes, synthetic_shapes
from kernels.registry import operator_spec


def drawn(generate, count, seed):
    """`count` shapes of a space, the same for the seed, each a valid convolution of all three
    classes."""
    shapes = generate(count, seed=seed)
    assert shapes == generate(count, seed=seed) and len(shapes) == count
    spec = operator_spec("conv2d_fwd")
    problems = [spec.problem("bf16", s) for s in shapes]
    assert {spec.shape_class(p) for p in problems} == {"dense", "grouped", "depthwise"}
    return shapes


def test_coverage_shapes_are_valid_wider_and_repeatable():
    shapes = drawn(coverage_shapes, 500, 3)
    assert max(s["R"] for s in shapes) == 11 and max(s["dil_h"] for s in shapes) == 3
    assert any(s["H"] != s["W"] for s in shapes) and any(s["K"] == 2 * s["C"] == 2 * s["G"]
                                                         for s in shapes)
    widths = {s["C"] // s["G"] for s in shapes if 1 < s["G"] < s["C"]}
    assert {1, 3, 6, 12, 48} & widths  # group widths the training generator never draws
    assert max(s["R"] for s in synthetic_shapes(500, seed=3)) <= 7


def test_stage_shapes_put_narrow_layers_on_large_maps_and_wide_ones_on_small():
    shapes = drawn(stage_shapes, 400, 41)
    large = [s["C"] for s in shapes if s["H"] >= 112]
    small = [s["C"] for s in shapes if s["H"] <= 14]
    assert statistics.median(small) >= 8 * statistics.median(large)
    pointwise = [s for s in shapes if s["R"] == 1 and s["G"] == 1]
    # the class the other spaces almost never draw: 1x1 layers of at most 32 channels on
    # maps of 56x56 and more
    assert sum(s["C"] <= 32 and s["K"] <= 32 and s["H"] >= 56 for s in pointwise) >= 20
    assert {s["stride_h"] for s in shapes} == {1, 2} and all(s["C"] % 8 == 0 for s in shapes)


def spec_file(tmp_path, operator, space):
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({
        "name": "t", "operator": operator, "dtype": "bf16",
        "problems": [{"synthetic": {"count": 12, "seed": 3, "space": space}}]}))
    return path


def test_a_spec_draws_from_the_space_it_names(tmp_path):
    resolved = load_spec(spec_file(tmp_path, "conv2d_bwd_weight", "stages"))
    assert [p.C for p in resolved.problems] == [s["C"] for s in stage_shapes(12, seed=3)]
    assert operator_spec("conv2d_fwd").shape_spaces().keys() == {"training", "coverage",
                                                                 "stages"}


@pytest.mark.parametrize("operator, space", [("conv2d_fwd", "pointwise"),
                                             ("groupnorm_bwd", "stages")])
def test_a_space_the_operator_lacks_is_named_with_the_ones_it_has(tmp_path, operator, space):
    with pytest.raises(SpecError) as err:
        load_spec(spec_file(tmp_path, operator, space))
    assert "synthetic.space" in err.value.where
    assert f"no shape space {space!r}" in err.value.message and "coverage" in err.value.message
