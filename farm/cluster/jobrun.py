"""One claimed job, run to the end: compile its instances, send batches of one problem's pairs
to the ready actors (a bounded number in flight per actor), take each pair's row as it streams
back, and write the rows in batched transactions that also advance the job's counters.

Faults. The pair in flight on an actor is the first of its oldest batch whose row has not come
back. A row with launch_error or timeout, an actor that died (RayActorError) or one silent past
the deadline (hang_factor * policy.timeout_s + hang_slack_s; killed with ray.kill and
restarted) is a failed attempt of that pair; the rest of the actor's batches go back to the
queue. A pair is retried until it fails the same way twice (or three times in all), and only
its final result is written, so every pair is recorded exactly once.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable

import ray
from ray.exceptions import RayActorError

from farm.cluster.compiling import CompileOutcome, Compiles
from farm.cluster.config import CoordinatorConfig, NoWorkers, Reporter
from farm.cluster.pairs import JobPlan, Pair, finished
from farm.cluster.pool import ActorPool, Batch, Slot
from farm.store import SETTLED_STATES, Queries
from kernels.registry import get_family

RETRIED_STATES = ("launch_error", "timeout")
MAX_ATTEMPTS = 3
NONE = CompileOutcome(ok=True, log="nothing to compile")  # a library call (the vendor family)


class JobRun:
    def __init__(self, store: Queries, pool: ActorPool, compiles: Compiles, plan: JobPlan,
                 claimer: str, arch: str, config: CoordinatorConfig, reporter: Reporter):
        self.store, self.pool, self.compiles, self.plan = store, pool, compiles, plan
        self.claimer, self.arch, self.config, self.reporter = claimer, arch, config, reporter
        self.pending: dict[int, list[int]] = {p: [] for p in plan.problems}
        self.waiting: dict[str, list[Pair]] = defaultdict(list)  # compile identity -> pairs
        self.attempts: dict[Pair, list[str]] = {}
        self.rows: list[dict] = []
        self.delta = [0, 0]  # done, failed not yet written
        self.counts = [0, 0, 0]  # done, failed, cached written
        self.open = 0
        self.measured = 0  # rows written by this run (for the rate)
        self.last_flush = self.last_beat = self.last_sync = self.last_workers = time.monotonic()
        self.deadline_s = plan.policy.timeout_s * config.hang_factor + config.hang_slack_s
        self.unserved_since: float | None = None  # when the job last had no actor at all
        self.background: Callable[[], None] | None = None  # called every tick (retraining)

    # Setup -----------------------------------------------------------------------------
    def start(self) -> None:
        environments = self.pool.environment_ids(self.arch)
        self.environment_id = environments[0]  # for rows no actor made (compile errors)
        progress = finished(self.store, self.plan, environments)
        self.counts = [progress.done, progress.failed, progress.cached]
        self.open = len(progress.todo)
        self.store.heartbeat(self.plan.job_id, self.claimer, total_pairs=len(self.plan.pairs),
                             done_pairs=progress.done, failed_pairs=progress.failed,
                             cached_pairs=progress.cached)
        self.reporter.job_started(self.plan.job_id, self.plan.name, len(self.plan.pairs),
                                  sum(self.counts))
        compiles: dict[int, tuple[str | None, CompileOutcome | None]] = {}
        for pair in progress.todo:
            reason = self._unsupported(pair)
            if reason:
                self._final(pair, {"status": "unsupported", "message": reason,
                                   "policy": self.plan.policy.model_dump()})
                continue
            if pair[1] not in compiles:
                instance = self.plan.instances[pair[1]]
                compiles[pair[1]] = (self.compiles.request(instance)
                                     if get_family(instance.family).compiled else (None, NONE))
            self._compiled(pair, *compiles[pair[1]])

    def _unsupported(self, pair: Pair) -> str | None:
        """Why a compiled instance cannot serve the pair's problem (a shape rule, checked here
        so the pair never reaches a GPU); a library family's answer depends on the worker's
        installed libraries, so its worker checks it."""
        instance = self.plan.instances[pair[1]]
        family = get_family(instance.family)
        return family.applicable(instance, self.plan.problems[pair[0]]) if family.compiled \
            else None

    def _compiled(self, pair: Pair, key: str | None, outcome: CompileOutcome | None) -> None:
        """Queue a pair whose instance compiled, record its compile error, or let it wait."""
        if outcome is None:
            self.waiting[key].append(pair)
        elif outcome.ok is False:
            self._final(pair, {"status": "compile_error", "message": outcome.log,
                               "policy": self.plan.policy.model_dump()})
        else:
            self.pending[pair[0]].append(pair[1])

    # The loop --------------------------------------------------------------------------
    def run(self) -> None:
        """Measure every open pair; JobStopped if the job is cancelled or taken over."""
        self.start()
        while self.open > 0:
            self.tick()
        self.flush(force=True)

    def tick(self) -> None:
        now = time.monotonic()
        for key, outcome in self.compiles.poll():
            for pair in self.waiting.pop(key, []):
                self._compiled(pair, key, outcome)
        if now - self.last_sync >= self.config.sync_s:
            self.last_sync = now
            self.pool.sync()
        for slot in self.pool.poll_removed():
            self._requeue_slot(slot)
        self.pool.poll()
        self._check_served(now)
        self.dispatch()
        waitables = [b.gen for s in self.pool.slots for b in s.batches]
        waitables += list(self.compiles.running)
        if waitables:
            ray.wait(waitables, num_returns=1, timeout=0.2)
        else:
            time.sleep(0.05)
        for slot in list(self.pool.slots):
            self.drain(slot)
        self.check_deadlines()
        self.flush()
        self.store_workers()
        if self.background is not None:
            self.background()

    def _check_served(self, now: float) -> None:
        """Give up (NoWorkers) when no actor of the job's architecture has been alive for
        start_timeout_s: the cluster lost its GPUs. The job goes back to the queue."""
        if any(s.arch in (None, self.arch) for s in self.pool.slots):
            self.unserved_since = None
        elif self.unserved_since is None:
            self.unserved_since = now
        elif now - self.unserved_since > self.config.start_timeout_s:
            raise NoWorkers(f"no measure actor of {self.arch} for "
                            f"{self.config.start_timeout_s:g} s")

    def dispatch(self) -> None:
        for slot in self.pool.ready(self.arch):
            slot.job_id = self.plan.job_id
            while len(slot.batches) < self.config.batches_per_actor:
                problem_id = next((p for p, ks in self.pending.items() if ks), None)
                if problem_id is None:
                    return
                self.pending[problem_id].sort(key=self._measure_order)
                kernel_ids = self.pending[problem_id][:self.config.max_batch]
                del self.pending[problem_id][:len(kernel_ids)]
                instances = [self.plan.instances[k] for k in kernel_ids]
                modules = tuple(sorted({type(get_family(i.family)).__module__
                                        for i in instances}))
                gen = slot.actor.measure_batch.remote(self.plan.problems[problem_id],
                                                      instances, self.plan.policy, modules)
                slot.batches.append(Batch(problem_id, kernel_ids, gen))
                slot.changed = True
                if len(slot.batches) == 1:
                    self._show(slot)

    def _measure_order(self, kernel_id: int) -> int:
        return get_family(self.plan.instances[kernel_id].family).measure_order

    def drain(self, slot: Slot) -> None:
        """Take the rows that streamed back from a slot's batches, oldest batch first."""
        while slot.batches:
            batch, ended = slot.batches[0], False
            try:
                while batch.gen.next_ready():
                    try:
                        ref = next(batch.gen)
                    except StopIteration:
                        ended = True
                        break
                    if not self._take(slot, batch, ray.get(ref)):
                        return  # the slot was restarted; its batches were requeued
            except RayActorError as exc:
                self._died(slot, f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
                return
            if not (ended or batch.gen.is_finished()):
                return
            slot.batches.popleft()
            self._requeue(batch.problem_id, batch.unanswered())
            if slot.batches:
                slot.batches[0].since = time.monotonic()
            self._show(slot)

    def _take(self, slot: Slot, batch: Batch, item: dict) -> bool:
        batch.since = time.monotonic()
        if "lost" in item:  # the process lost its GPU context and exits: restart it now
            self._requeue_slot(slot)
            self.pool.restart(slot, kill=True)
            return False
        if "error" in item:  # the worker raised: the pair it was on (or every pair) failed
            hit = batch.unanswered() if item["key"] is None else batch.unanswered()[:1]
            for kernel_id in hit:
                self._attempt((batch.problem_id, kernel_id), {
                    "environment_id": slot.environment_id, "status": "launch_error",
                    "message": f"the measure worker raised {item['error']}"})
            batch.received += len(hit)
            return True
        kernel_id = batch.kernel_ids[batch.received]
        if self.plan.instances[kernel_id].key != item["key"]:
            raise RuntimeError(f"row for {item['key']} where {kernel_id} was expected")
        batch.received += 1
        slot.pairs_done += 1
        row = {k: v for k, v in item.items() if k != "key"}
        row["environment_id"] = slot.environment_id
        if row["status"] in RETRIED_STATES:
            self._attempt((batch.problem_id, kernel_id), row)
        else:
            self._final((batch.problem_id, kernel_id), row)
        self._show(slot)
        return True

    def check_deadlines(self) -> None:
        now = time.monotonic()
        for slot in self.pool.ready(self.arch):
            if slot.batches and now - slot.batches[0].since > self.deadline_s:
                head = slot.batches[0]
                if head.unanswered():
                    self._attempt((head.problem_id, head.unanswered()[0]), {
                        "environment_id": slot.environment_id, "status": "timeout",
                        "message": f"no result within {self.deadline_s:g} s; the measure "
                                   "process was killed and restarted"})
                    head.received += 1
                self._requeue_slot(slot)
                self.pool.restart(slot, kill=True)

    # Outcomes --------------------------------------------------------------------------
    def _died(self, slot: Slot, reason: str) -> None:
        """The actor's process died without a word: the pair in flight failed, once."""
        for batch in slot.batches:
            if batch.unanswered():
                self._attempt((batch.problem_id, batch.unanswered()[0]), {
                    "environment_id": slot.environment_id, "status": "launch_error",
                    "message": f"the measure process died during this pair ({reason})"})
                batch.received += 1
                break
        self._requeue_slot(slot)
        self.pool.restart(slot, kill=False)

    def _attempt(self, pair: Pair, row: dict) -> None:
        """A failed attempt: final once it failed the same way twice (or MAX_ATTEMPTS)."""
        tried = self.attempts.setdefault(pair, [])
        tried.append(row["status"])
        if tried.count(row["status"]) >= 2 or len(tried) >= MAX_ATTEMPTS:
            note = f" [attempts: {', '.join(tried)}]"
            self._final(pair, {**row, "message": (row.get("message") or "") + note})
        else:
            self._requeue(pair[0], [pair[1]])

    def _final(self, pair: Pair, row: dict) -> None:
        self.rows.append({**row, "problem_id": pair[0], "kernel_id": pair[1],
                          "job_id": self.plan.job_id,
                          "environment_id": row.get("environment_id") or self.environment_id})
        self.delta[0 if row["status"] in SETTLED_STATES else 1] += 1
        self.open -= 1

    def _requeue(self, problem_id: int, kernel_ids: list[int]) -> None:
        if kernel_ids:
            self.pending[problem_id][:0] = kernel_ids

    def _requeue_slot(self, slot: Slot) -> None:
        for batch in slot.batches:
            self._requeue(batch.problem_id, batch.unanswered())
            try:
                ray.cancel(batch.gen)
            except Exception:  # noqa: BLE001 - finished or its actor is gone
                pass
        slot.batches.clear()
        slot.changed = True

    def abandon(self) -> None:
        """Stop: cancel what is in flight (a running batch stops after its current pair)."""
        for slot in self.pool.slots:
            self._requeue_slot(slot)
            slot.job_id, slot.measuring = None, None
        self.compiles.cancel()

    # Writes ----------------------------------------------------------------------------
    def flush(self, force: bool = False) -> None:
        now = time.monotonic()
        if self.rows and (force or len(self.rows) >= self.config.flush_rows
                          or now - self.last_flush >= self.config.flush_s):
            self.store.record_results(self.plan.job_id, self.claimer, self.rows, *self.delta)
            self.measured += len(self.rows)
            self.counts[0] += self.delta[0]
            self.counts[1] += self.delta[1]
            self.rows, self.delta = [], [0, 0]
            self.last_flush = self.last_beat = now
            self.reporter.job_progress(self.plan.job_id, *self.counts)
        elif now - self.last_beat >= self.config.heartbeat_s:
            self.store.heartbeat(self.plan.job_id, self.claimer)
            self.last_beat = now

    def _show(self, slot: Slot) -> None:
        slot.changed = True
        head = slot.batches[0] if slot.batches else None
        if head is None or not head.unanswered():
            slot.measuring = None
            return
        instance = self.plan.instances[head.unanswered()[0]]
        slot.measuring = (f"job {self.plan.job_id}: {instance.name} on "
                          f"{self.plan.problems[head.problem_id].label()}")

    def store_workers(self, force: bool = False) -> None:
        """Write the workers' states for `farm workers` (at most once a second)."""
        now = time.monotonic()
        if force or now - self.last_workers >= 1.0:
            self.last_workers = now
            rows = self.pool.worker_rows(force)
            if rows:
                self.store.save_workers(rows)
