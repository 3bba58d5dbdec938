"""Sweep specs: valid ones expand to problems; every malformed one names its fault."""

from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings, strategies as st

from farm.specs import SpecError, load_spec
from kernels import registry
from kernels.family import KernelFamily

SHIPPED = sorted([*Path("jobs/examples").glob("*.yaml"), *Path("jobs/training").glob("*.yaml")])
ROW = dict(N=1, C=8, K=8, G=1, H=8, W=8, R=3, S=3, pad_h=1, pad_w=1)


class ToyFamily(KernelFamily):
    name = "toy"
    operators = ("conv2d_fwd",)

    def configs(self, operator):
        return [{"tile": t, "stages": s} for t in (32, 64) for s in (2, 3)]

    def launches(self, instance, problem):
        return []


@pytest.fixture
def toy_family():
    registry.register(ToyFamily())
    yield
    registry._FAMILIES.pop("toy", None)


def write(tmp_path, spec, name="spec.yaml"):
    path = tmp_path / name
    path.write_text(spec if isinstance(spec, str) else yaml.safe_dump(spec))
    return path


def base(**change):
    return {"name": "t", "operator": "conv2d_fwd", "dtype": "bf16",
            "problems": [{"inline": [ROW]}], **change}


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_shipped_specs_are_valid(path):
    resolved = load_spec(path)
    assert resolved.problems
    assert len(set(resolved.problems)) == len(resolved.problems)


def test_generate_expands_references_ranges_and_same_padding(tmp_path):
    spec = base(problems=[{"generate": {"N": 2, "C": {"start": 16, "stop": 64, "mul": 2},
                                        "K": "C", "G": [1, "C", 3], "H": 14, "W": "H",
                                        "R": [1, 3], "S": "R", "pad_h": "same",
                                        "pad_w": "same"}}])
    resolved = load_spec(write(tmp_path, spec))
    # C in {16, 32, 64} x G in {1, C, 3} x R in {1, 3}; G=3 never divides C: dropped
    assert len(resolved.problems) == 3 * 2 * 2 and resolved.dropped == 3 * 2
    for p in resolved.problems:
        assert p.K == p.C and p.W == p.H and p.S == p.R and p.pad_h == (p.R - 1) // 2


def test_csv_rows_load_relative_to_the_spec_and_extra_columns_are_ignored(tmp_path):
    (tmp_path / "shapes.csv").write_text(
        "N,C,K,G,H,W,R,S,stride_h,stride_w,pad_h,pad_w,dil_h,dil_w,network\n"
        "1,8,8,1,8,8,3,3,1,1,1,1,1,1,toy\n2,8,16,8,8,8,3,3,2,2,1,1,1,1,toy\n")
    resolved = load_spec(write(tmp_path, base(problems=[{"csv": "shapes.csv"}])))
    assert [p.N for p in resolved.problems] == [1, 2]


BAD = [
    ("not: [valid", "line 1", "not valid YAML"),
    ("- a list", "", "a spec is a YAML mapping"),
    (base(operator="conv3d"), "operator", "unknown operator 'conv3d'; known: conv2d_bwd_data"),
    (base(dtype="int8"), "dtype", "Input should be"),
    (base(name=""), "name", "at least 1 character"),
    (base(problems=[]), "problems", "at least 1 item"),
    (base(problems=[{"inline": [ROW], "csv": "x.csv"}]), "problems[0]", "exactly one of"),
    (base(problems=[{"inline": [{**ROW, "C": 9, "G": 2}]}]), "problems[0].inline[0]",
     "C=9 is not divisible by G=2"),
    (base(problems=[{"inline": [{**ROW, "H": 1, "pad_h": 0}]}]), "problems[0].inline[0]",
     "output size"),
    (base(problems=[{"csv": "missing.csv"}]), "problems[0].csv", "no such CSV file"),
    (base(problems=[{"generate": {**ROW, "X": 1}}]), "problems[0].generate.X", "unknown field"),
    (base(problems=[{"generate": {**ROW, "K": "Q"}}]), "problems[0].generate.K",
     "neither a value nor an earlier field"),
    (base(problems=[{"generate": {**ROW, "C": 9, "G": 2}}]), "problems[0].generate",
     "none of the 1 combinations"),
    (base(problems=[{"generate": {**ROW, "C": {"start": 1, "stop": 8}}}]),
     "problems[0].generate.C", "exactly one of step or mul"),
    (base(kernels=[{"family": "nope"}]), "kernels[0].family", "unknown kernel family 'nope'"),
    (base(timing={"warmup": -1}), "timing.warmup", "greater than or equal to 0"),
    (base(timing={"repeats": 5}), "timing.repeats", "Extra inputs are not permitted"),
    (base(priority="high"), "priority", "valid integer"),
]


@pytest.mark.parametrize("spec, where, message", BAD, ids=[m for _, _, m in BAD])
def test_malformed_specs_name_the_place_and_the_fault(tmp_path, spec, where, message):
    path = write(tmp_path, spec)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert str(path) in str(info.value)
    assert where in info.value.where
    assert message in info.value.message


def test_csv_errors_name_the_line(tmp_path):
    (tmp_path / "s.csv").write_text("N,C,K,G,H,W,R,S\n1,8,8,1,8,8,3,3\n1,8,8,3,8,8,3,3\n")
    with pytest.raises(SpecError, match=r"s.csv line 3\): C=8 is not divisible by G=3"):
        load_spec(write(tmp_path, base(problems=[{"csv": "s.csv"}])))
    (tmp_path / "t.csv").write_text("N,C,K,G,H,W\n1,8,8,1,8,8\n")
    with pytest.raises(SpecError, match="the header lacks column.*R, S"):
        load_spec(write(tmp_path, base(problems=[{"csv": "t.csv"}])))


def test_kernel_filters_are_checked_against_the_family(tmp_path, toy_family):
    ok = load_spec(write(tmp_path, base(kernels=[{"family": "toy",
                                                  "where": {"tile": [64], "stages": {"min": 3}}}])))
    assert ok.spec.kernels[0].family == "toy"
    with pytest.raises(SpecError, match="toy has no config field 'warps'"):
        load_spec(write(tmp_path, base(kernels=[{"family": "toy", "where": {"warps": 4}}])))
    with pytest.raises(SpecError, match="matches no instance"):
        load_spec(write(tmp_path, base(kernels=[{"family": "toy", "where": {"tile": 128}}])))
    with pytest.raises(SpecError, match="does not serve conv2d_bwd_data"):
        load_spec(write(tmp_path, base(operator="conv2d_bwd_data",
                                       kernels=[{"family": "toy"}])))


fields = st.fixed_dictionaries({k: st.one_of(st.integers(-3, 70), st.text(max_size=3),
                                             st.none(), st.lists(st.integers(0, 9), max_size=2))
                                for k in ROW})


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(row=fields, source=st.sampled_from(["inline", "generate"]))
def test_generated_garbage_is_either_valid_or_a_spec_error(tmp_path, row, source):
    payload = [row] if source == "inline" else row
    path = write(tmp_path, base(problems=[{source: payload}]))
    try:
        resolved = load_spec(path)
    except SpecError as exc:
        assert exc.where.startswith(str(path)) and exc.message
        return
    assert all(p.C % p.G == 0 and p.P >= 1 for p in resolved.problems)
