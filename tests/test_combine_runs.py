"""bench/combine_runs.py: per shape the best same-run ratio over the runs, and our fastest time
against the vendor's median time over the runs (a run where the vendor was slow cannot lift
that one)."""

from __future__ import annotations

import json
import sys

from bench import combine_runs


def run_file(path, shapes):
    path.write_text(json.dumps({"figures": {"shapes": [
        {"op": "conv2d_fwd", "problem": problem, "kind": "depthwise", "ours_us": ours,
         "vendor_us": vendor, "speedup": vendor / ours, "best_instance": f"i{ours}"}
        for problem, ours, vendor in shapes]}}))
    return path


def test_best_ratio_and_vendor_median(tmp_path, monkeypatch):
    a = run_file(tmp_path / "a.json", [("N32 a", 10.0, 12.0), ("N32 b", 20.0, 20.0)])
    b = run_file(tmp_path / "b.json", [("N32 a", 11.0, 30.0)])  # the vendor slow in this run
    c = run_file(tmp_path / "c.json", [("N32 a", 12.0, 13.0)])
    monkeypatch.setattr(sys, "argv", ["combine_runs", str(a), str(b), str(c), "--name", "t",
                                      "--out", str(tmp_path)])
    combine_runs.main()
    rows = {r["problem"]: r for r in json.loads((tmp_path / "t.json").read_text())
            ["figures"]["shapes"]}
    shape = rows["N32 a"]
    assert shape["from_run"] == "b.json" and abs(shape["speedup"] - 30 / 11) < 1e-9
    assert shape["ours_best_us"] == 10.0 and shape["vendor_median_us"] == 13.0
    assert abs(shape["vs_vendor_median"] - 1.3) < 1e-9
    assert rows["N32 b"]["vs_vendor_median"] == 1.0
    summary = json.loads((tmp_path / "t.json").read_text())["figures"]["summary"]
    assert abs(summary["conv2d_fwd"]["depthwise"]["vs_vendor_median"] - 1.3 ** 0.5) < 1e-9


def test_batch_keeps_the_shapes_of_those_batch_sizes_only(tmp_path, monkeypatch):
    a = tmp_path / "a.json"
    a.write_text(json.dumps({"figures": {"shapes": [
        {"op": "conv2d_fwd", "problem": f"N{n} a", "batch": n, "kind": "dense", "ours_us": 10.0,
         "vendor_us": 10.0 * n, "speedup": float(n), "best_instance": "i"} for n in (1, 8, 32)]}}))
    monkeypatch.setattr(sys, "argv", ["combine_runs", str(a), "--batch", "32", "8", "--name",
                                      "t", "--out", str(tmp_path)])
    combine_runs.main()
    figures = json.loads((tmp_path / "t.json").read_text())["figures"]
    assert sorted(r["problem"] for r in figures["shapes"]) == ["N32 a", "N8 a"]
    assert abs(figures["summary"]["conv2d_fwd"]["dense"]["speedup"] - 16.0) < 1e-9
