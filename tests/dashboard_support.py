"""A small farm database whose dashboard figures are known by hand, for the dashboard tests.

Three conv2d_fwd bf16 problems on one H100 environment, kernels a, b (conv_igemm), c
(conv_direct) and the vendor; median times in µs:

            a    b    c               vendor   oracle     speed-up
  P1 dense  10   20   40              12.5     10 (a)     1.25      resnet50 layer1.0.conv2
  P2 g8     30   15   wrong_result    10       15 (b)     0.667
  P3 dw     8    16   4               8        4 (c)      2.0       mobilenet_v2 depthwise

Best single instance: a (efficiency 1, 0.5, 0.5; ranks 1, 2, 2). Model v1 (promoted) chose
a, c, c: efficiency 1, 0 (c failed on P2), 1. Model v2 stores figures but no choices.
Jobs: 1 done, 2 running (50 of 100 pairs finished in 100 s: ETA 100 s), 3 queued.
"""

from __future__ import annotations

import datetime as dt

from farm.problems import ConvProblem
from farm.store import open_store
from farm.store.models import Artifact, Job, Model, utcnow

BASE = dict(H=56, W=56, R=3, S=3, pad_h=1, pad_w=1)
PROBLEMS = [ConvProblem(op="conv2d_fwd", N=32, C=64, K=64, G=1, **BASE),
            ConvProblem(op="conv2d_fwd", N=8, C=64, K=64, G=8, **{**BASE, "H": 14, "W": 14}),
            ConvProblem(op="conv2d_fwd", N=32, C=144, K=144, G=144, **BASE)]
KERNELS = {"a": "conv_igemm", "b": "conv_igemm", "c": "conv_direct", "v": "vendor"}
TIMES = {"a": (10.0, 30.0, 8.0), "b": (20.0, 15.0, 16.0), "c": (40.0, None, 4.0),
         "v": (12.5, 10.0, 8.0)}
BUNDLE = b"farm-select-bundle bytes"


def seed(url: str) -> None:
    store = open_store(url, migrate=True)
    job = store.create_job("sweep-done", "conv2d_fwd", "bf16", 0, {"spec": {}}, PROBLEMS)
    running = store.create_job("sweep-running", "conv2d_fwd", "bf16", 1, {"spec": {}},
                               PROBLEMS[:1])
    store.create_job("sweep-queued", "conv2d_fwd", "bf16", 5, {"spec": {}}, PROBLEMS[1:])
    env = store.environment_id("fp-h100", gpu_name="NVIDIA H100 80GB HBM3", arch="sm_90",
                               sm_count=132, driver="580", compiler="nvrtc 13.0",
                               runtime="cuda 13.0", farm_version="0.1.0")
    ids = store.kernel_ids([{"key": f"key-{k}", "family": f, "operator": "conv2d_fwd",
                             "name": f"kernel_{k}", "config": {}, "source_hash": "x"}
                            for k, f in KERNELS.items()])
    pids = dict(store.job_problem_ids(job))
    rows = []
    for k, times in TIMES.items():
        for problem_id, t in zip(sorted(pids), times):
            rows.append({"kernel_id": ids[f"key-{k}"], "problem_id": problem_id,
                         "environment_id": env, "job_id": job, "samples": 20,
                         "status": "ok" if t else "wrong_result", "median_us": t,
                         "min_us": t, "tflops": pids[problem_id].flops / t / 1e6 if t else None,
                         "message": None if t else "max error 0.5 > 0.02",
                         "policy": {}, "telemetry": {}})
    store.record_measurements(rows)
    store.set_job_state(job, "done", total_pairs=12, done_pairs=11, failed_pairs=1)
    now = utcnow()
    store.save_workers([
        {"name": "coord/gpu0", "coordinator": "coord", "kind": "gpu", "node": "node0",
         "gpu_name": "NVIDIA H100 80GB HBM3", "arch": "sm_90", "state": "measuring",
         "job_id": running, "measuring": "kernel_a on P1", "pairs_done": 50, "restarts": 1,
         "started_at": now, "updated_at": now},
        {"name": "coord/gpu1", "coordinator": "coord", "kind": "gpu", "node": "node0",
         "gpu_name": "NVIDIA H100 80GB HBM3", "arch": "sm_90", "state": "stopped",
         "job_id": None, "measuring": None, "pairs_done": 0, "restarts": 0,
         "started_at": now, "updated_at": now}])
    with store.session.begin() as session:
        job_row = session.get(Job, running)
        job_row.status, job_row.total_pairs, job_row.done_pairs = "running", 100, 40
        job_row.failed_pairs, job_row.started_at = 10, now - dt.timedelta(seconds=100)
        artifact = Artifact(key="bundle-v2", kind="model_bundle", target="sm_90",
                            compiler="lightgbm", data=BUNDLE, size=len(BUNDLE))
        session.add(artifact)
        session.flush()
        keys = [p.key for p in PROBLEMS]
        session.add(Model(operator="conv2d_fwd", arch="sm_90", dtype="bf16", version=1,
                          promoted=True, created_at=now - dt.timedelta(days=2), metrics={
                              "kind": "ranker", "holdout": {
                                  "problems": 3, "mean": 2 / 3, "median": 1.0, "p10": 0.2,
                                  "min": 0.0, "top1": 2 / 3, "top5": 2 / 3,
                                  "per_problem": [{"problem": keys[0], "kernel": "kernel_a"},
                                                  {"problem": keys[1], "kernel": "kernel_c"},
                                                  {"problem": keys[2], "kernel": "key-c"}]}}))
        session.add(Model(operator="conv2d_fwd", arch="sm_90", dtype="bf16", version=2,
                          promoted=False, artifact_id=artifact.id, created_at=now, metrics={
                              "kind": "regressor", "holdout": {
                                  "problems": 40, "mean": 0.95, "median": 0.97, "p10": 0.9,
                                  "min": 0.6, "top1": 0.7, "top5": 0.9,
                                  "top_k": {"2": 0.97, "4": 0.99, "8": 1.0}}}))
    store.engine.dispose()
