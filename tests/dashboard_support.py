"""Small farm databases for the dashboard tests: one whose figures are known by hand (seed),
one of SYNTHETIC measurements of every candidate instance (seed_synthetic_scopes).

seed: two operators on one H100 environment, bf16. Three conv2d_fwd problems, kernels a, b
(conv_igemm), c (conv_direct) and the vendor; median times in µs:

            a    b    c               vendor   oracle     speed-up
  P1 dense  10   20   40              12.5     10 (a)     1.25      resnet50 layer1.0.conv2
  P2 g8     30   15   wrong_result    10       15 (b)     0.667
  P3 dw     8    16   4               8        4 (c)      2.0       mobilenet_v2 depthwise

Best single instance: a (efficiency 1, 0.5, 0.5; ranks 1, 2, 2). Model v1 (promoted) chose
a, c, c: efficiency 1, 0 (c failed on P2), 1. Model v2 stores figures but no choices, and
evaluations: leave-one-network-out, a held-out spec, a judged recording (pooled and per class).

Three groupnorm_bwd problems, kernels x (gn_onepass), y (gn_twopass) and the vendor:

                             x    y             vendor   oracle    speed-up
  Q1 N8 C64 56x56 G32 nhwc   20   25            30       20 (x)    1.5     resnet50_gn
  Q2 N2 C320 64x64 G32 nchw  50   40            20       40 (y)    0.5     sd15_unet
  Q3 N4 C96 7x7 G96 nhwc     6    unsupported   6        6 (x)     1.0

Best single instance: x (efficiency 1, 0.8, 1). Model v1 (promoted) chose y everywhere:
efficiency 0.8, 1, 0 (y does not run Q3); ranks 2, 1, none.

Jobs: 1 done (conv), 2 running (50 of 100 pairs finished in 100 s: ETA 100 s), 3 queued,
4 done (groupnorm). Measurements: 21, 19 ok, 1 wrong result, 1 unsupported.
"""

from __future__ import annotations

import datetime as dt

from farm.store import open_store
from farm.store.models import FAILED_STATES, Artifact, Job, Model, utcnow
from kernels.conv.problem import ConvProblem
from kernels.groupnorm.problem import GroupNormProblem

JUDGED = {"problems": 186, "scored": 186, "mean": 0.956, "p10": 0.885, "min": 0.216,
          "top1": 0.323, "top_k": {"2": 0.970}, "under_0_70": 4, "first_not_measured": 0,
          "oracle_family_untrained": 0, "over_vendor_geomean": 1.015}  # a judged recording's
BASE = dict(H=56, W=56, R=3, S=3, pad_h=1, pad_w=1)
PROBLEMS = [ConvProblem(op="conv2d_fwd", N=32, C=64, K=64, G=1, **BASE),
            ConvProblem(op="conv2d_fwd", N=8, C=64, K=64, G=8, **{**BASE, "H": 14, "W": 14}),
            ConvProblem(op="conv2d_fwd", N=32, C=144, K=144, G=144, **BASE)]
KERNELS = {"a": "conv_igemm", "b": "conv_igemm", "c": "conv_direct", "v": "vendor"}
TIMES = {"a": (10.0, 30.0, 8.0), "b": (20.0, 15.0, 16.0), "c": (40.0, None, 4.0),
         "v": (12.5, 10.0, 8.0)}
GN = "groupnorm_bwd"
GN_PROBLEMS = [GroupNormProblem(op=GN, N=8, C=64, H=56, W=56, G=32),
               GroupNormProblem(op=GN, N=2, C=320, H=64, W=64, G=32, layout="nchw"),
               GroupNormProblem(op=GN, N=4, C=96, H=7, W=7, G=96)]
GN_KERNELS = {"x": "gn_onepass", "y": "gn_twopass", "gv": "vendor"}
GN_TIMES = {"x": (20.0, 50.0, 6.0), "y": (25.0, 40.0, None), "gv": (30.0, 20.0, 6.0)}
FAILED = {"conv2d_fwd": ("wrong_result", "max error 0.5 > 0.02"),
          GN: ("unsupported", "C/G=32 channels per group: not a multiple of the vector")}
BUNDLE = b"farm-select-bundle bytes"


def _measure(store, operator, problems, kernels, times, env) -> int:
    """A done job of `problems` with one row per (kernel, problem): ok where times has a time,
    else FAILED[operator]."""
    job = store.create_job(f"sweep-{operator}", operator, "bf16", 0, {"spec": {}}, problems)
    ids = store.kernel_ids([{"key": f"key-{k}", "family": f, "operator": operator,
                             "name": f"kernel_{k}", "config": {}, "source_hash": "x"}
                            for k, f in kernels.items()])
    pids = dict(store.job_problem_ids(job))
    status, message = FAILED[operator]
    rows = []
    for k, row_times in times.items():
        for problem_id, t in zip(sorted(pids), row_times):
            rows.append({"kernel_id": ids[f"key-{k}"], "problem_id": problem_id,
                         "environment_id": env, "job_id": job, "samples": 20,
                         "status": "ok" if t else status, "median_us": t,
                         "min_us": t, "tflops": pids[problem_id].flops / t / 1e6 if t else None,
                         "gbps": pids[problem_id].min_bytes / t / 1e3 if t else None,
                         "message": None if t else message,
                         "policy": {}, "telemetry": {}})
    store.record_measurements(rows)
    failed = sum(r["status"] in FAILED_STATES for r in rows)
    store.set_job_state(job, "done", total_pairs=len(rows), done_pairs=len(rows) - failed,
                        failed_pairs=failed)
    return job


def seed(url: str) -> None:
    store = open_store(url, migrate=True)
    env = store.environment_id("fp-h100", gpu_name="NVIDIA H100 80GB HBM3", arch="sm_90",
                               sm_count=132, driver="580", compiler="nvrtc 13.0",
                               runtime="cuda 13.0", farm_version="0.1.0")
    _measure(store, "conv2d_fwd", PROBLEMS, KERNELS, TIMES, env)
    running = store.create_job("sweep-running", "conv2d_fwd", "bf16", 1, {"spec": {}},
                               PROBLEMS[:1])
    store.create_job("sweep-queued", "conv2d_fwd", "bf16", 5, {"spec": {}}, PROBLEMS[1:])
    _measure(store, GN, GN_PROBLEMS, GN_KERNELS, GN_TIMES, env)
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
                                  "top_k": {"2": 0.97, "4": 0.99, "8": 1.0}},
                              "evaluations": {
                                  "leave_one_network_out": {"pooled": {
                                      "problems": 166, "mean": 0.983, "median": 1.0,
                                      "p10": 0.945, "min": 0.66, "top1": 0.63, "top5": 0.97,
                                      "top_k": {"2": 0.992, "4": 0.998, "8": 0.998},
                                      "failed_choices": 0}, "folds": {}},
                                  "held_out_spec": {
                                      "spec": "training-coverage-fwd", "problems": 322,
                                      "mean": 0.972, "median": 1.0, "p10": 0.894, "min": 0.359,
                                      "top1": 0.7, "top5": 0.96,
                                      "top_k": {"2": 0.987, "4": 0.996, "8": 0.998},
                                      "failed_choices": 0},
                                  "judged_recording": {
                                      "recording": "h200-networks.parquet",
                                      "gpu": "NVIDIA H200", "pooled": JUDGED,
                                      "classes": {"dense": {**JUDGED, "problems": 140},
                                                  "depthwise": {**JUDGED, "problems": 46,
                                                                "under_0_70": 0,
                                                                "over_vendor_geomean": 1.4}}}}}))
        session.add(Model(operator=GN, arch="sm_90", dtype="bf16", version=1, promoted=True,
                          created_at=now - dt.timedelta(days=1), metrics={
                              "kind": "ranker", "holdout": {
                                  "problems": 3, "mean": 0.6, "median": 0.8, "p10": 0.16,
                                  "min": 0.0, "top1": 1 / 3, "top5": 2 / 3,
                                  "per_problem": [{"problem": p.key, "kernel": "kernel_y"}
                                                  for p in GN_PROBLEMS]}}))
    store.engine.dispose()


def seed_synthetic_scopes(url: str, operators: tuple[str, ...], networks: int = 4,
                          random: int = 4) -> None:
    """SYNTHETIC measurements (farm.select.synthetic) of every candidate instance and the
    vendor on `networks` shapes of each operator's network tables and `random` generated ones."""
    from farm.select.synthetic import seed_synthetic, synthetic_problems

    store = open_store(url, migrate=True)
    for operator in operators:
        seed_synthetic(store, synthetic_problems(operator, "bf16", networks, random))
    store.engine.dispose()
