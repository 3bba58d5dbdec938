"""bench/ablation.py: our best with and without some instances, against one run's vendor."""

import pandas as pd
import pytest

from bench.ablation import best_times, summarise


def pairs() -> pd.DataFrame:
    rows = [  # (problem, family, instance, status, median_us)
        ("A", "vendor", "v", "ok", 10.0), ("A", "f", "a_tma1", "ok", 20.0),
        ("A", "f", "a_tma2", "ok", 8.0),
        ("B", "vendor", "v", "ok", 10.0), ("B", "f", "b_tma1", "ok", 5.0),
        ("B", "f", "b_tma2", "unsupported", float("nan")),
        ("C", "vendor", "v", "ok", 10.0), ("C", "f", "c_tma2", "ok", 10.0),
        ("D", "vendor", "v", "wrong_result", 1.0), ("D", "f", "d_tma1", "ok", 1.0)]
    frame = pd.DataFrame(rows, columns=["problem", "family", "instance", "status", "median_us"])
    return frame.assign(op="conv2d_bwd_data", batch=32)


def test_the_pattern_leaves_its_instances_out_and_the_vendor_in():
    times = best_times(pairs(), "_tma2").droplevel(["op", "batch"])
    assert list(times.index) == ["A", "B", "C"]  # D has no ok vendor time
    assert times.loc["A"].tolist()[:3] == [10.0, 8.0, 20.0]
    assert times.loc["B", "with_us"] == times.loc["B", "without_us"] == 5.0
    assert pd.isna(times.loc["B", "only_us"])  # unsupported is not served
    assert pd.isna(times.loc["C", "without_us"])  # nothing of ours left without them


def test_classes_summarised_over_the_shapes_they_serve():
    kinds = {("conv2d_bwd_data", 32, p): "dense" for p in "ABC"}
    [row] = summarise(best_times(pairs(), "_tma2"), kinds)
    assert row["shapes"] == 3 and row["served"] == 2 and row["won"] == 1
    assert row["with"] == pytest.approx((10 / 8 * 10 / 5 * 10 / 10) ** (1 / 3))
    assert row["without"] == pytest.approx((10 / 20 * 10 / 5) ** 0.5)  # C has none left
    assert row["served_with"] == pytest.approx((10 / 8 * 1.0) ** 0.5)
    assert row["served_without"] == pytest.approx(10 / 20)


def test_a_regular_expression_leaves_out_several_kinds():
    times = best_times(pairs(), r"^(a|b)_tma[12]$", regex=True).droplevel(["op", "batch"])
    assert pd.isna(times.loc["A", "without_us"]) and pd.isna(times.loc["B", "without_us"])
    assert times.loc["C", "without_us"] == 10.0  # c_tma2 stays
    literal = best_times(pairs(), "(a|b)").droplevel(["op", "batch"])  # not a regex: no match
    assert literal["without_us"].tolist() == literal["with_us"].tolist()
