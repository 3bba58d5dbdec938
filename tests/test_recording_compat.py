"""The shipped recordings (format 1: one column per convolution field) still load, import and
replay, and give the same best instances as when problems were stored one column per field, and
the selection figures of tests/data/recording_baseline.json (its `made_with` says which
selection made them)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from farm.recording import RECORDINGS_DIR, import_recording, read_recording, row_problem
from farm.replay import ReplayWorker
from farm.select.data import load_dataset
from farm.select.train import TrainConfig, train
from farm.store import open_store
from kernels.registry import families_for, get_family

BASELINE = json.loads((Path(__file__).parent / "data" / "recording_baseline.json").read_text())


def digest(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


@pytest.mark.parametrize("name", sorted(BASELINE["recordings"]))
def test_a_shipped_recording_gives_the_figures_it_gave(name, tmp_path):
    want = BASELINE["recordings"][name]
    recording = read_recording(RECORDINGS_DIR / name)
    frame = recording.frame
    assert len(frame) == want["rows"]
    keys = {row_problem(r).key for r in frame.drop_duplicates("problem_key").to_dict("records")}
    assert keys == set(frame["problem_key"])  # the record's key is the recorded one
    ok = frame[frame["status"] == "ok"]
    best = ok.sort_values(["problem_key", "median_us", "instance"]).drop_duplicates("problem_key")
    assert len(best) == want["problems_with_ok"]
    assert digest(dict(zip(best["problem_key"], best["instance"]))) == want["best_digest"]

    store = open_store(f"sqlite:///{tmp_path / 'farm.db'}")
    import_recording(store, recording)
    for label, model_want in want["models"].items():
        operator, dtype = label.split("/")
        data = load_dataset(store, operator, recording.arch, dtype)
        assert data.window["problems"] == model_want["problems"]
        assert data.window["splits"] == model_want["splits"]
        # the baseline's trees: 20 rounds of 31 leaves (the convolutions' default grew to 63)
        config = TrainConfig(rounds=20, kinds=("regressor",), num_leaves=31)
        metrics = train(data, config).metrics
        as_stored = json.loads(json.dumps(metrics))  # as the baseline file keeps them
        assert as_stored["holdout"] == model_want["holdout"]
        assert as_stored["validation"] == model_want["validation"]
        chosen = sorted((r["problem"], r["kernel"]) for r in metrics["per_problem"])
        assert digest(chosen) == model_want["choices_digest"]


def test_a_shipped_recording_replays_its_rows():
    """Replay answers a recorded pair (one whose kernel source is unchanged) with its row."""
    recording = read_recording(RECORDINGS_DIR / "h100-standard.parquet")
    worker = ReplayWorker(recording)
    ok = recording.frame[recording.frame["status"] == "ok"]
    current = {i.name: i for op in ok["operator"].unique() for f in families_for(op)
               for i in f.instances(op, "bf16")}
    rows = [r for r in ok.to_dict("records")
            if r["instance"] in current and current[r["instance"]].source_hash == r["source_hash"]]
    assert rows, "no recorded pair of an unchanged kernel source"
    for row in rows[:: max(1, len(rows) // 50)]:
        problem = row_problem(row)
        [(_, result)] = list(worker.measure_problem(problem, [current[row["instance"]]]))
        assert result.status == "ok" and result.median_us == row["median_us"]


@pytest.mark.parametrize("name", ["h100-standard.parquet", "h100-groupnorm.parquet",
                                  "h100-dwsep.parquet"])
def test_every_recorded_vendor_row_still_replays(name):
    """The vendor instance of each operator keeps the source hash its rows were recorded with
    (the hash of OperatorSpec.vendor_source), so the baseline replays beside the farm's rows."""
    frame = read_recording(RECORDINGS_DIR / name).frame
    vendor = frame[frame["family"] == "vendor"]
    assert len(vendor)
    current = {(i.operator, i.dtype): i for (op, dtype) in
               vendor[["operator", "dtype"]].drop_duplicates().itertuples(index=False)
               for i in get_family("vendor").instances(op, dtype)}
    stale = vendor[[current[(r.operator, r.dtype)].source_hash != r.source_hash
                    for r in vendor.itertuples()]]
    assert stale.empty, f"{len(stale)} vendor rows would replay as not_recorded"


@pytest.mark.parametrize("path", sorted(RECORDINGS_DIR.rglob("*.parquet")), ids=lambda p: p.name)
def test_every_shipped_recording_row_is_of_the_current_source(path):
    """A kernel source changed without its pairs measured again would replay as not_recorded
    (and `farm demo` would crown whatever family is left): every row's instance still exists
    with the recorded source hash and kernel key."""
    frame = read_recording(path).frame
    kernels = frame.drop_duplicates(["family", "instance", "operator", "dtype"])
    stale = []
    for (family, operator, dtype), rows in kernels.groupby(["family", "operator", "dtype"]):
        current = {i.name: i for i in get_family(family).instances(operator, dtype)}
        stale += [r.instance for r in rows.itertuples()
                  if r.instance not in current or current[r.instance].source_hash
                  != r.source_hash or current[r.instance].key != r.kernel_key]
    assert not stale, f"{len(stale)} instances recorded from another source, e.g. {stale[:3]}"
