"""bench/speedup_vs_intensity.py: a shape's intensity from its FLOP and byte rates, its band,
and the geometric mean speed-up per operator and band."""

import math

import pytest

from bench.speedup_vs_intensity import band_of, by_band, points

RESULTS = {"figures": {"shapes": [
    {"op": "conv2d_fwd", "problem": "a", "kind": "dense", "ours_tflops": 0.5, "ours_gbps": 100.0,
     "speedup": 2.0},  # 5 FLOP per byte
    {"op": "conv2d_fwd", "problem": "b", "kind": "dense", "ours_tflops": 1.0, "ours_gbps": 200.0,
     "speedup": 0.5},  # 5 FLOP per byte
    {"op": "conv2d_fwd", "problem": "c", "kind": "dense", "ours_tflops": 400.0,
     "ours_gbps": 1000.0, "speedup": 0.8},  # 400
    {"op": "conv2d_fwd", "problem": "d", "kind": "dense", "ours_tflops": 1.0, "ours_gbps": 1.0,
     "speedup": None},  # no vendor time: left out
]}}


def test_points_and_bands():
    found = points(RESULTS)
    assert [p["problem"] for p in found] == ["a", "b", "c"]
    assert found[0]["flop_per_byte"] == pytest.approx(5.0)
    assert found[2]["flop_per_byte"] == pytest.approx(400.0)
    assert band_of(5.0) == "0-10" and band_of(10.0) == "10-30" and band_of(400.0) == "300+"
    bands = by_band(found)
    assert list(bands) == ["conv2d_fwd 0-10", "conv2d_fwd 300+"]
    low = bands["conv2d_fwd 0-10"]
    assert low["shapes"] == 2 and low["wins"] == 1 and math.isclose(low["geomean"], 1.0)
    assert bands["conv2d_fwd 300+"]["geomean"] == pytest.approx(0.8)


def test_points_of_some_classes():
    mixed = {"figures": {"shapes": RESULTS["figures"]["shapes"][:2] + [
        {"op": "conv2d_fwd", "problem": "e", "kind": "depthwise", "ours_tflops": 0.1,
         "ours_gbps": 100.0, "speedup": 0.05}]}}
    assert [p["problem"] for p in points(mixed)] == ["a", "b", "e"]
    assert [p["problem"] for p in points(mixed, ["dense"])] == ["a", "b"]
    assert [p["problem"] for p in points(mixed, ["depthwise", "grouped"])] == ["e"]
