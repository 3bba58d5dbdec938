"""Problem records: validation rules, derived sizes and identity."""

import pytest
from hypothesis import given, strategies as st

from farm.problems import ProblemError, problem_from_fields
from kernels.conv.problem import ConvProblem

RESNET_3X3 = dict(N=32, C=128, K=128, G=1, H=28, W=28, R=3, S=3, pad_h=1, pad_w=1)


def test_derived_sizes_of_a_resnet_layer():
    p = ConvProblem(op="conv2d_fwd", **RESNET_3X3)
    assert (p.P, p.Q) == (28, 28)
    assert p.flops == 2 * 32 * 28 * 28 * 128 * 128 * 9
    assert p.min_bytes == 2 * (32 * 28 * 28 * 128 * 2 + 128 * 128 * 9)
    assert p.gemm == (32 * 28 * 28, 128, 128 * 9)


def test_gemm_view_per_direction_for_a_grouped_strided_layer():
    fields = dict(N=2, C=64, K=32, G=4, H=9, W=7, R=3, S=3, stride_h=2, stride_w=2)
    fwd = ConvProblem(op="conv2d_fwd", **fields)
    assert (fwd.P, fwd.Q) == (4, 3)
    assert fwd.gemm == (2 * 4 * 3, 8, 16 * 9)
    assert ConvProblem(op="conv2d_bwd_data", **fields).gemm == (2 * 9 * 7, 16, 8 * 9)
    assert ConvProblem(op="conv2d_bwd_weight", **fields).gemm == (8, 16 * 9, 2 * 4 * 3)


def test_a_view_is_the_problem_with_its_changes_and_its_own_derived_sizes():
    import dataclasses

    grouped = ConvProblem(op="conv2d_bwd_weight", **{**RESNET_3X3, "G": 32})
    assert grouped.gemm == (4, 4 * 9, 32 * 28 * 28)  # cached on the original
    assert grouped.key and grouped.number_values()  # so are these
    view = grouped.view(G=8)
    assert view == dataclasses.replace(grouped, G=8) and hash(view) == hash(
        dataclasses.replace(grouped, G=8))
    assert view.key == dataclasses.replace(grouped, G=8).key != grouped.key
    assert view.number_values() == dataclasses.replace(grouped, G=8).number_values()
    assert view.gemm == (16, 16 * 9, 32 * 28 * 28) and (view.P, view.Q) == (28, 28)
    assert grouped.G == 32 and grouped.gemm == (4, 4 * 9, 32 * 28 * 28)
    strided = grouped.view(stride_h=2, H=27)  # the sizes it changes are computed again
    assert (strided.P, strided.Q) == (14, 28) and strided.gemm == (4, 4 * 9, 32 * 14 * 28)
    assert strided == dataclasses.replace(grouped, stride_h=2, H=27)
    with pytest.raises(ProblemError, match="not a shape field: op"):
        grouped.view(op="conv2d_fwd")


@pytest.mark.parametrize("change, message", [
    (dict(C=130, G=4), "C=130 is not divisible by G=4"),
    (dict(K=30, G=4, C=128), "K=30 is not divisible by G=4"),
    (dict(H=2, pad_h=0), "output size"),
    (dict(dil_h=0), "dil_h=0 must be at least 1"),
    (dict(pad_w=-1), "pad_w=-1 must be at least 0"),
    (dict(N="many"), "N must be an integer"),
    (dict(N=1 << 20, H=1024, W=1024), "over the 2^31-1 limit"),
])
def test_invalid_shapes_name_the_rule(change, message):
    with pytest.raises(ProblemError, match=message.replace("^", r"\^")):
        ConvProblem(op="conv2d_fwd", **{**RESNET_3X3, **change})


def test_unknown_operator_and_dtype_are_named():
    with pytest.raises(ProblemError, match="unknown operator 'conv3d'"):
        problem_from_fields("conv3d", "bf16", RESNET_3X3)
    with pytest.raises(ProblemError, match="unknown dtype 'int4'"):
        problem_from_fields("conv2d_fwd", "int4", RESNET_3X3)


def test_from_fields_defaults_optional_fields_and_reports_missing_ones():
    p = problem_from_fields("conv2d_fwd", "bf16", {**RESNET_3X3, "pad_h": "", "extra": "x"})
    assert p.pad_h == 0 and p.stride_h == 1
    with pytest.raises(ProblemError, match="missing field.*R"):
        problem_from_fields("conv2d_fwd", "bf16", {k: v for k, v in RESNET_3X3.items()
                                                   if k != "R"})


def test_digit_strings_are_integers_and_other_digits_a_problem_error():
    from farm.problems import ProblemError, as_int

    assert as_int("R", " 3 ") == 3 and as_int("pad_h", "-1") == -1
    for text in ("²", "٣", "3.5", ""):  # isdigit() is true for the first two
        with pytest.raises(ProblemError, match="R must be an integer"):
            as_int("R", text)


def test_key_depends_on_every_field():
    base = ConvProblem(op="conv2d_fwd", **RESNET_3X3)
    keys = {base.key}
    for change in (dict(stride_w=2), dict(pad_h=0), dict(dil_w=2), dict(N=31)):
        keys.add(ConvProblem(op="conv2d_fwd", **{**RESNET_3X3, **change}).key)
    keys.add(ConvProblem(op="conv2d_bwd_data", **RESNET_3X3).key)
    keys.add(ConvProblem(op="conv2d_fwd", dtype="fp16", **RESNET_3X3).key)
    assert len(keys) == 7
    assert ConvProblem(op="conv2d_fwd", **RESNET_3X3).key == base.key


small = st.integers(min_value=-2, max_value=40)


@given(st.fixed_dictionaries({f: small for f in ConvProblem.FIELDS}))
def test_any_fields_give_a_valid_problem_or_a_problem_error(fields):
    try:
        p = ConvProblem(op="conv2d_fwd", **fields)
    except ProblemError as exc:
        assert str(exc)
        return
    assert p.C % p.G == 0 and p.K % p.G == 0 and p.P >= 1 and p.Q >= 1
    assert p.flops > 0 and p.min_bytes > 0
