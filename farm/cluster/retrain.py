"""Retraining inside the coordinator: after each job, an operator/arch/dtype whose measurements
have grown 20% since its newest selection model (or, with a period, whose model is older than
the period while new measurements exist; that is also checked during a job) gets a Ray CPU task
(num_cpus=1) that loads its data and trains; the coordinator polls the task's ObjectRef between
batches and registers the model when it is done (promoted only if not worse on the held-out
problems). Measurement never waits for it. With active sampling (active_batch), the same task
also picks the shapes the model is unsure of or was wrong near (farm/select/active.py), and the
coordinator queues them as a job, at most active_rounds times per operator/arch/dtype."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import ray

from farm.cluster.config import CoordinatorConfig, Reporter
from farm.store import Queries

Target = tuple[str, str, str]  # operator, arch, dtype


@ray.remote(num_cpus=1, max_retries=0)
def train_task(db_url: str, operator: str, arch: str, dtype: str,
               include_replay: bool, active_batch: int = 0, active_pool: int = 2000,
               seed: int = 0, shapes: list[dict] | None = None) -> tuple[Any, Any, Any]:
    """Load an operator/arch/dtype's measurements and train its model: (TrainedModel, Dataset,
    the SamplingBatch to measure next, from `shapes` if given, or None)."""
    from farm.select.active import plan_batch
    from farm.select.catalogue import compile_cache_resources
    from farm.select.data import SplitConfig, load_dataset
    from farm.select.train import train
    from farm.store import open_store

    store = open_store(db_url)
    try:
        data = load_dataset(store, operator, arch, dtype, SplitConfig(),
                            compile_cache_resources(arch), include_replay)
        model = train(data)
        batch = (plan_batch(model, data, active_batch, active_pool, seed, shapes=shapes)
                 if active_batch else None)
        return model, data, batch
    finally:
        store.engine.dispose()


def queue_batch(store: Queries, batch: Any, arch: str, round_: int) -> int | None:
    """Queue an active-sampling batch as a job on the operator's candidate families (no
    vendor baseline); None for an empty batch."""
    from farm.api import queue
    from farm.select.catalogue import candidate_families
    from farm.specs import resolve_spec

    if not batch.problems:
        return None
    spec = {"name": f"active-sampling {batch.operator} {batch.dtype} {arch} round {round_}",
            "operator": batch.operator, "dtype": batch.dtype, "priority": 1,
            "problems": [{"inline": batch.fields()}],
            "kernels": [{"family": f.name} for f in candidate_families(batch.operator)]}
    return queue(resolve_spec(spec, Path("active-sampling")), store)


def listed_shapes(spec_path: str | None) -> dict[tuple[str, str], list[dict]]:
    """A job spec's problems as active sampling's pool for its operator and dtype ({} without
    one); a spec that does not load raises SpecError, before anything runs."""
    from farm.specs import load_spec
    from kernels.registry import operator_spec

    if spec_path is None:
        return {}
    resolved = load_spec(spec_path)
    fields = operator_spec(resolved.spec.operator).fields
    return {(resolved.spec.operator, resolved.spec.dtype):
            [{f: getattr(p, f) for f in fields} for p in resolved.problems]}


def task_url(store: Queries) -> str:
    """The store's URL for a task in another process (a SQLite path made absolute)."""
    url = store.engine.url
    if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
        url = url.set(database=str(Path(url.database).expanduser().resolve()))
    return url.render_as_string(hide_password=False)


class Retrainer:
    """The coordinator's training tasks: starts those due, registers those done."""

    def __init__(self, store: Queries, config: CoordinatorConfig, reporter: Reporter) -> None:
        self.store, self.config, self.reporter = store, config, reporter
        self.running: dict[Any, tuple[Target, int]] = {}  # ObjectRef -> target, measurements
        self.failed: dict[Target, int] = {}  # measurements when a training last failed
        self.deferred: set[Target] = set()  # due checks that waited for a running training
        self.registered: list[Any] = []  # Registrations, oldest first
        self.sampled: dict[Target, list[int]] = {}  # active-sampling jobs queued per target
        self.listed = listed_shapes(config.active_shapes)  # (operator, dtype) -> the pool
        self.last_check = time.monotonic()

    def poll(self, check: bool = False) -> None:
        """Register finished models. With `check` (between jobs) start the trainings due by
        growth or age; else, with a period, those due by age (every retrain_check_s), so that
        a long job still gets fresh models but a growing one does not retrain at every 20%."""
        if self.running:
            done, _ = ray.wait(list(self.running), num_returns=len(self.running), timeout=0)
            for ref in done:
                self._finish(ref, *self.running.pop(ref))
        now = time.monotonic()
        if check or self.deferred - {t for t, _ in self.running.values()}:
            self._start_due(self.config.retrain_growth)
        elif (self.config.retrain_every_s is not None
              and now - self.last_check >= self.config.retrain_check_s):
            self.last_check = now
            self._start_due(math.inf)

    def wait(self, timeout_s: float | None = None) -> None:
        """Register the running trainings' models as they finish (at most timeout_s)."""
        begin = time.monotonic()
        while self.running and (timeout_s is None or time.monotonic() - begin < timeout_s):
            ray.wait(list(self.running), num_returns=1, timeout=0.5)
            self.poll()

    def queued_jobs(self) -> int:
        """How many active-sampling jobs this retrainer has queued."""
        return sum(len(jobs) for jobs in self.sampled.values())

    def cancel(self) -> None:
        for ref in self.running:
            ray.cancel(ref, force=True)
        self.running.clear()

    def _start_due(self, growth: float) -> None:
        from farm.select.registry import retrain_due
        from farm.store.queries import ModelQueries

        c = self.config
        busy = {target for target, _ in self.running.values()}
        self.deferred = set()
        for operator, arch, dtype, _ in ModelQueries(self.store).measured_targets(
                c.retrain_include_replay):
            if (operator, arch, dtype) in busy:
                if math.isfinite(growth):  # asked again when its training is done
                    self.deferred.add((operator, arch, dtype))
                continue
            due = retrain_due(self.store, operator, arch, dtype, growth,
                              c.retrain_include_replay, c.retrain_every_s)
            if due.due and self.failed.get((operator, arch, dtype)) != due.measurements:
                rounds = len(self.sampled.get((operator, arch, dtype), []))
                batch = c.active_batch if rounds < c.active_rounds else 0
                ref = train_task.remote(task_url(self.store), operator, arch, dtype,
                                        c.retrain_include_replay, batch, c.active_pool, rounds,
                                        self.listed.get((operator, dtype)))
                self.running[ref] = ((operator, arch, dtype), due.measurements)
                self.reporter.note(f"training a selection model for {operator} {dtype} on "
                                   f"{arch}: {due.reason}")

    def _finish(self, ref: Any, target: Target, measurements: int) -> None:
        from farm.select.registry import register

        label = " ".join(target)
        try:
            model, data, batch = ray.get(ref)
        except Exception as exc:  # noqa: BLE001 - too few problems, a lost task: say, go on
            self.reporter.note(f"training {label} failed: {type(exc).__name__}: {exc}")
            self.failed[target] = measurements  # again once more measurements exist
            return
        done = register(self.store, model, data)
        self.registered.append(done)
        self.reporter.note(f"model {done.model.id} ({label}, version {done.model.version}): "
                           f"{'promoted' if done.promoted else 'not promoted'} ({done.reason})")
        if batch is not None:
            from farm.specs import SpecError

            jobs = self.sampled.setdefault(target, [])
            try:
                job = queue_batch(self.store, batch, target[1], len(jobs) + 1)
            except SpecError as exc:  # the model is registered; measuring goes on without it
                self.reporter.note(f"active sampling {label}: the batch could not be queued "
                                   f"({exc})")
                return
            if job is not None:
                jobs.append(job)
                unsure = sum(r.startswith("unsure") for r in batch.reasons)
                self.reporter.note(f"active sampling {label}: job {job} queued with "
                                   f"{len(batch.problems)} shapes ({len(batch.problems) - unsure} "
                                   f"near wrong choices, {unsure} where the model is unsure)")
