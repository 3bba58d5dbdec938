"""bench/vs_vendor.py without a GPU: a shape's line and the geometric means with the vendor call
through torch.compile as a second baseline (timed, failed, or not measured), and that call's
instance and compile step in kernels/vendor.py, with a stand-in for PyTorch."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench.vs_vendor import from_recording, geomean, op_geomeans, summarize
from farm.gpu.base import GpuError
from farm.measure import PairResult
from kernels import vendor
from kernels.family import Instance
from kernels.operator import VendorCall
from kernels.registry import operator_spec

OP = "dwsep_fwd"
PROBLEM = operator_spec(OP).problem("bf16", dict(N=1, C=32, H=14, W=14, K=64, R=3, S=3, pad=1))
EAGER = vendor.FAMILY.instances(OP, "bf16")[0]
COMPILED = vendor.FAMILY.compiled_instance(OP, "bf16")
OURS = Instance(family="dwsep_stream", operator=OP, dtype="bf16", config=(("tile_p", 64),),
                name="stream_dwsep_fwd_bf16_tile_p64", source_hash="0")


def ok(us: float) -> PairResult:
    return PairResult("ok", median_us=us)


def line(*results) -> dict:
    return summarize(OP, 1, "net layer", PROBLEM, list(results), copy_gbps=3000.0)


def test_the_compiled_call_is_an_instance_no_sweep_makes():
    assert [i.settings for i in vendor.FAMILY.instances(OP, "bf16")] == [{"library": "torch"}]
    assert COMPILED.settings == {"library": "torch.compile"} and COMPILED.key != EAGER.key
    assert vendor.is_compiled(COMPILED) and not vendor.is_compiled(EAGER)
    assert not vendor.is_compiled(OURS)


def test_a_line_with_both_baselines():
    entry = line((EAGER, ok(30.0)), (COMPILED, ok(20.0)), (OURS, ok(10.0)))
    assert (entry["vendor_us"], entry["speedup"]) == (30.0, 3.0)
    assert (entry["compiled_us"], entry["speedup_vs_compiled"]) == (20.0, 2.0)
    assert entry["compiled_error"] is None and entry["failed"] == 0


def test_a_compiled_call_that_failed_is_null_with_its_error():
    failed = PairResult("launch_error", message="other: torch.compile failed: no Triton")
    entry = line((EAGER, ok(30.0)), (COMPILED, failed), (OURS, ok(10.0)),
                 (OURS, PairResult("wrong_result", message="off")))
    assert (entry["vendor_us"], entry["speedup"]) == (30.0, 3.0)
    assert entry["compiled_us"] is None and entry["speedup_vs_compiled"] is None
    assert entry["compiled_error"] == "launch_error: other: torch.compile failed: no Triton"
    assert entry["failed"] == 1  # ours; the compiled call's failure is its own field
    # a fast compiled call is never taken for the vendor's when the vendor's failed
    entry = line((EAGER, PairResult("launch_error")), (COMPILED, ok(5.0)), (OURS, ok(10.0)))
    assert entry["vendor_us"] is None and entry["speedup_vs_compiled"] == 0.5


def test_a_line_without_the_compiled_call():
    entry = line((EAGER, ok(30.0)), (OURS, ok(10.0)))
    assert entry["speedup"] == 3.0
    assert entry["compiled_us"] is entry["speedup_vs_compiled"] is entry["compiled_error"] is None


def test_geomeans_per_batch_over_the_compiled_call():
    entries = [line((EAGER, ok(40.0)), (COMPILED, ok(20.0)), (OURS, ok(10.0))),
               line((EAGER, ok(10.0)), (COMPILED, ok(80.0)), (OURS, ok(10.0))),
               line((EAGER, ok(30.0)), (COMPILED, PairResult("wrong_result")), (OURS, ok(10.0)))]
    entries[2]["batch"] = 32
    means = op_geomeans(entries, [1, 32])
    assert means["by_batch"][1]["speedup"] == pytest.approx(2.0)  # 4 and 1
    assert means["by_batch"][1]["speedup_vs_compiled"] == pytest.approx(4.0)  # 2 and 8
    assert means["by_batch"][32]["speedup"] == pytest.approx(3.0)
    assert means["by_batch"][32]["speedup_vs_compiled"] is None
    assert means["all"] == pytest.approx(math.prod([4.0, 1.0, 3.0]) ** (1 / 3))
    assert means["shapes"] == 3


class FakeTorch:
    """torch.compile and torch._dynamo.reset as far as kernels/vendor.py uses them."""

    def __init__(self, error: Exception | None = None) -> None:
        self.error, self.compiled, self.resets = error, 0, 0
        self.cuda = SimpleNamespace(is_available=lambda: True)
        self._dynamo = SimpleNamespace(reset=self.reset)

    def reset(self) -> None:
        self.resets += 1

    def compile(self, fn, *, dynamic):
        assert dynamic is False
        self.compiled += 1
        if self.error:
            raise self.error
        return fn


def test_compiled_runs_once_before_it_is_timed(monkeypatch):
    torch = FakeTorch()
    monkeypatch.setattr(vendor, "_torch", lambda: torch)
    calls = []

    def run():
        calls.append(1)
        return {"y": 1}

    call = vendor.compiled(VendorCall(run, {"y": None}))
    assert (torch.compiled, len(calls)) == (1, 1)  # compiled by a first run
    assert call.run() == {"y": 1} and call.outputs == {"y": None}
    assert vendor.FAMILY.applicable(COMPILED, PROBLEM) is None
    vendor.forget_compiled()
    assert torch.resets == 1


def test_a_compile_failure_is_a_gpu_error_with_the_message(monkeypatch):
    torch = FakeTorch(RuntimeError("Cannot find a working triton installation"))
    monkeypatch.setattr(vendor, "_torch", lambda: torch)
    with pytest.raises(GpuError, match="torch.compile failed: RuntimeError: Cannot find a "
                                       "working triton"):
        vendor.compiled(VendorCall(lambda: {}, {}))
    monkeypatch.delattr(FakeTorch, "compile")  # a PyTorch before 2.0
    assert "no torch.compile" in vendor.FAMILY.applicable(COMPILED, PROBLEM)
    assert vendor.FAMILY.applicable(EAGER, PROBLEM) is None


def test_the_recorded_comparison_splits_by_batch(tmp_path):
    """From the shipped dwsep recording (no GPU): per batch size, the shapes and the geometric
    mean over them, consistent with the per-shape lines and with the overall figure."""
    recording = Path(__file__).resolve().parents[1] / "jobs" / "recordings" / "h100-dwsep.parquet"
    from_recording(recording, str(tmp_path), "recorded")
    figures = json.loads((tmp_path / "recorded.json").read_text())["figures"]
    summary = figures["summary"][OP]
    lines = [e for e in figures["shapes"] if e["speedup"]]
    assert set(summary["by_batch"]) == {"1", "8", "32"}
    for batch, part in summary["by_batch"].items():
        mine = [e["speedup"] for e in lines if e["batch"] == int(batch)]
        assert part["shapes"] == len(mine) > 0
        assert math.isclose(part["geomean"], geomean(mine))
    assert sum(p["shapes"] for p in summary["by_batch"].values()) == summary["shapes"]


def test_a_lost_gpu_context_ends_the_run_with_the_shapes_measured_before_it(monkeypatch,
                                                                             tmp_path):
    """A hung or faulting instance loses the GPU context: the run writes the whole shapes it
    measured, every pair of the shape it was on, and the pair to blame, then exits non-zero."""
    import sys

    import pandas as pd

    import bench.vs_vendor as vs_vendor
    from farm.measure import DeviceLost

    second = operator_spec(OP).problem("bf16", dict(N=2, C=32, H=14, W=14, K=64, R=3, S=3,
                                                    pad=1))

    class LosingWorker:
        fingerprint = {"gpu_name": "stand-in"}

        def measure_problem(self, problem, instances, policy):
            yield EAGER, ok(20.0)
            if problem == second:
                yield OURS, PairResult("timeout", message="timeout: the kernel did not finish")
                raise DeviceLost("timeout: the kernel did not finish within 10 s")
            yield OURS, ok(10.0)

    monkeypatch.setattr(vs_vendor, "GpuWorker", LosingWorker)
    monkeypatch.setattr(vs_vendor, "copy_bandwidth_gbps", lambda: 3000.0)
    monkeypatch.setattr(vs_vendor, "shapes", lambda op, which, dtype, batch, networks=None,
                        tables=None:
                        [("first", PROBLEM), ("second", second)])
    monkeypatch.setattr(sys, "argv", ["vs_vendor.py", "--ops", OP, "--batch", "1",
                                      "--no-compiled", "--out", str(tmp_path), "--name", "lost"])
    with pytest.raises(SystemExit, match=f"lost on {second.label()} by {OURS.name}"):
        vs_vendor.main()
    figures = json.loads((tmp_path / "lost.json").read_text())["figures"]
    assert [e["shape"] for e in figures["shapes"]] == ["first"]
    assert figures["shapes"][0]["speedup"] == pytest.approx(2.0)
    assert figures["device_lost"]["instance"] == OURS.name
    assert figures["device_lost"]["message"].startswith("timeout")
    pairs = pd.read_parquet(tmp_path / "lost_pairs.parquet")
    assert list(pairs["shape"]) == ["first", "first", "second", "second"]
    assert list(pairs["status"]) == ["ok", "ok", "ok", "timeout"]


def test_the_layers_of_some_networks_only():
    from bench.vs_vendor import shapes

    every = shapes(OP, "networks", "bf16", 32)
    some = shapes(OP, "networks", "bf16", 32, ["xception"])
    assert some and all(label.startswith("xception ") for label, _ in some)
    assert [x for x in every if x[0].startswith("xception ")] == some
    assert shapes(OP, "networks", "bf16", 32, []) == []


def test_the_layers_of_other_tables(tmp_path):
    """--tables: the layers of tables outside the operator's folder, at their batch size."""
    from pathlib import Path

    from bench.vs_vendor import shapes

    table = Path(__file__).parents[1] / "bench" / "tables" / "regnet_widths_n32.csv"
    layers = shapes("conv2d_fwd", "networks", "bf16", 32, tables=[table])
    assert len(layers) == 46 and all(p.G > 1 and p.N == 32 for _, p in layers)
    assert layers[0][0] == "regnet_x_1_6gf trunk_output.block1.block1-0.f.b.0"
    assert shapes("conv2d_fwd", "networks", "bf16", 8, tables=[table]) == []
    assert shapes("conv2d_fwd", "networks", "bf16", 32, ["regnet_y_8gf"], [table]) == [
        x for x in layers if x[0].startswith("regnet_y_8gf ")]
    copy = tmp_path / "mine_n32.csv"
    copy.write_text(table.read_text())
    assert shapes("conv2d_fwd", "networks", "bf16", 32, tables=[copy]) == layers


def test_a_table_that_is_missing_or_misnamed_is_refused_by_name(tmp_path):
    from bench.vs_vendor import table_refusal

    assert "no file" in table_refusal(tmp_path / "gone_n32.csv")
    odd = tmp_path / "layers.csv"
    odd.write_text("N,C\n")
    assert "not named <network>_n<batch>.csv" in table_refusal(odd)
    good = tmp_path / "layers_n8.csv"
    good.write_text("N,C\n")
    assert table_refusal(good) is None


def _short_run(monkeypatch, tmp_path, worker, *more):
    import sys

    import bench.vs_vendor as vs_vendor

    second = operator_spec(OP).problem("bf16", dict(N=2, C=32, H=14, W=14, K=64, R=3, S=3,
                                                    pad=1))
    monkeypatch.setattr(vs_vendor, "GpuWorker", lambda: worker(second))
    monkeypatch.setattr(vs_vendor, "copy_bandwidth_gbps", lambda: 3000.0)
    monkeypatch.setattr(vs_vendor, "shapes", lambda op, which, dtype, batch, networks=None,
                        tables=None:
                        [("first", PROBLEM), ("second", second)])
    monkeypatch.setattr(sys, "argv", ["vs_vendor.py", "--ops", OP, "--batch", "1",
                                      "--no-compiled", "--out", str(tmp_path), "--name", "short",
                                      *more])
    return vs_vendor


def test_a_time_limit_starts_no_shape_after_it_and_writes_those_measured(monkeypatch, tmp_path):
    import types

    clock = [0.0]  # the run's clock: only measuring moves it, however busy this machine is

    class SlowWorker:
        fingerprint = {"gpu_name": "stand-in"}

        def __init__(self, second):
            self.asked = []

        def measure_problem(self, problem, instances, policy):
            self.asked.append(problem)
            clock[0] += 0.2
            yield EAGER, ok(20.0)
            yield OURS, ok(10.0)

    vs_vendor = _short_run(monkeypatch, tmp_path, SlowWorker, "--time-limit-s", "0.1")
    monkeypatch.setattr(vs_vendor, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    vs_vendor.main()  # a time limit asked for is not a failure
    figures = json.loads((tmp_path / "short.json").read_text())["figures"]
    assert [e["shape"] for e in figures["shapes"]] == ["first"]
    assert figures["stopped"] == {"reason": "time limit of 0.1 s", "next_shape": "second"}


def test_sigterm_ends_the_run_with_the_shapes_measured_before_it(monkeypatch, tmp_path):
    """`timeout` ends a run by SIGTERM: the whole shapes measured are written, every pair of the
    shape it was on, and the run exits non-zero."""
    import os
    import signal

    import pandas as pd

    class EndedWorker:
        fingerprint = {"gpu_name": "stand-in"}

        def __init__(self, second):
            self.second = second

        def measure_problem(self, problem, instances, policy):
            yield EAGER, ok(20.0)
            if problem == self.second:
                os.kill(os.getpid(), signal.SIGTERM)
            yield OURS, ok(10.0)

    previous = signal.getsignal(signal.SIGTERM)
    vs_vendor = _short_run(monkeypatch, tmp_path, EndedWorker)
    with pytest.raises(SystemExit, match="ended by SIGTERM before second"):
        vs_vendor.main()
    assert signal.getsignal(signal.SIGTERM) == previous  # the run's handler is gone
    figures = json.loads((tmp_path / "short.json").read_text())["figures"]
    assert [e["shape"] for e in figures["shapes"]] == ["first"]
    assert figures["stopped"]["reason"] == "ended by SIGTERM"
    pairs = pd.read_parquet(tmp_path / "short_pairs.parquet")
    assert list(pairs["shape"]) == ["first", "first", "second"]


def test_after_a_stopped_run_only_the_shapes_it_did_not_measure(monkeypatch, tmp_path):
    """--after: a run its time limit stopped goes on from the shape it stopped before."""
    import types

    clock = [0.0]  # the run's clock: only measuring moves it, however busy this machine is

    class SlowWorker:
        fingerprint = {"gpu_name": "stand-in"}
        asked: list = []

        def __init__(self, second):
            pass

        def measure_problem(self, problem, instances, policy):
            SlowWorker.asked.append(problem.label())
            clock[0] += 0.2
            yield EAGER, ok(20.0)
            yield OURS, ok(10.0)

    vs_vendor = _short_run(monkeypatch, tmp_path, SlowWorker, "--time-limit-s", "0.1")
    monkeypatch.setattr(vs_vendor, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    vs_vendor.main()
    first_run = tmp_path / "short.json"
    vs_vendor = _short_run(monkeypatch, tmp_path, SlowWorker, "--after", str(first_run),
                           "--name", "rest")  # the last --name is the one argparse keeps
    vs_vendor.main()
    shapes = json.loads((tmp_path / "rest.json").read_text())["figures"]["shapes"]
    assert [e["shape"] for e in shapes] == ["second"]
    assert SlowWorker.asked == [PROBLEM.label(), shapes[0]["problem"]]


def test_after_something_that_is_not_a_run_is_refused(tmp_path):
    from bench.vs_vendor import measured_in

    (tmp_path / "x.json").write_text("[1, 2]")
    with pytest.raises(SystemExit, match="not a vs_vendor run's JSON"):
        measured_in([tmp_path / "x.json"])
    with pytest.raises(SystemExit, match="not a vs_vendor run's JSON"):
        measured_in([tmp_path / "missing.json"])
