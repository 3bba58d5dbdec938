"""One coordinator's share of a job: claim a few of its problems at a time, compile their
instances, send batches of one problem's pairs to the ready actors (a bounded number in flight
per actor), take the rows as they stream back in chunks, and write them in batched
transactions that also advance the job's counters, renew the claims and mark finished
problems done (farm/store/claims.py). It ends when no problem of the job is left to claim.

Faults. The pair in flight on an actor is the first of its oldest batch whose row has not come
back. A row with launch_error or timeout, an actor that died (RayActorError) or one silent past
the deadline (hang_factor * policy.timeout_s + hang_slack_s; killed with ray.kill and
restarted) is a failed attempt of that pair; the rest of the actor's batches go back to the
queue, and the pairs of a problem that saw a fault are sent `careful` (each row streamed alone)
from then on. A pair is retried until it fails the same way twice (or three times in all), and
only its final result is written, so every pair is recorded exactly once.
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
from farm.cluster.writer import ResultWriter, Write
from farm.store import SETTLED_STATES, ProblemClaim, Queries
from kernels.registry import get_family

RETRIED_STATES = ("launch_error", "timeout")
MAX_ATTEMPTS = 3
NONE = CompileOutcome(ok=True, log="nothing to compile")  # a library call (the vendor family)
CLAIM_RETRY_S = 2.0  # how often a run with no claimable problem left asks again

Claimer = Callable[[int], ProblemClaim | None]  # limit -> problems of this job, or None


def problems_to_hold(actors: int, config: CoordinatorConfig) -> int:
    """Problems a coordinator holds: enough to keep every actor's batches full for a while."""
    return max(8, 4 * actors * config.batches_per_actor)


class JobRun:
    def __init__(self, store: Queries, pool: ActorPool, compiles: Compiles, plan: JobPlan,
                 claimer: str, arch: str, config: CoordinatorConfig, reporter: Reporter,
                 claim: Claimer, first: ProblemClaim) -> None:
        self.store, self.pool, self.compiles, self.plan = store, pool, compiles, plan
        self.claimer, self.arch, self.config, self.reporter = claimer, arch, config, reporter
        self.claim, self.first = claim, first
        self.pending: dict[int, list[int]] = {}  # held problem -> kernels ready to send
        self.open_pairs: dict[int, int] = {}  # held problem -> pairs not yet final
        self.cached: dict[int, int] = {}  # held problem -> pairs another job measured
        self.unsettled: dict[int, int] = defaultdict(int)  # problem -> pairs awaiting compiles
        self.careful: set[int] = set()  # problems whose pairs go one row at a time
        self.finished: dict[int, int] = {}  # problems to mark done at the next write
        self.waiting: dict[str, list[Pair]] = defaultdict(list)  # compile identity -> pairs
        self.compiled: dict[int, tuple[str | None, CompileOutcome | None]] = {}
        self.attempts: dict[Pair, list[str]] = {}
        self.rows: list[dict] = []
        self.delta = [0, 0]  # done, failed not yet written
        self.measured = 0  # rows written by this run
        self.writer: ResultWriter | None = None
        self.last_flush = self.last_beat = self.last_sync = self.last_workers = time.monotonic()
        self.next_claim = 0.0
        self.deadline_s = plan.policy.timeout_s * config.hang_factor + config.hang_slack_s
        self.unserved_since: float | None = None  # when the job last had no actor at all
        self.background: Callable[[], None] | None = None  # called every tick (retraining)
        self.policy_row = {"policy": plan.policy.model_dump()}
        self.families = {k: get_family(i.family) for k, i in plan.instances.items()}
        self.order = {k: f.measure_order for k, f in self.families.items()}

    # Claims ----------------------------------------------------------------------------
    def start(self) -> None:
        self.environments = self.pool.environment_ids(self.arch)
        self.environment_id = self.environments[0]  # for rows no actor made (compile errors)
        self.store.heartbeat(self.plan.job_id, self.claimer, total_pairs=len(self.plan.pairs))
        self.writer = ResultWriter(self.store, self.plan.job_id, self.claimer)
        job = self.store.job(self.plan.job_id)
        self.counts = [job.done_pairs, job.failed_pairs, job.cached_pairs]
        self.reporter.job_started(self.plan.job_id, self.plan.name, len(self.plan.pairs),
                                  sum(self.counts))
        self.take(self.first.problem_ids)

    def want(self) -> int:
        return problems_to_hold(len(self.pool.ready(self.arch)), self.config)

    def top_up(self, now: float) -> None:
        """Claim more of the job's problems when fewer than half of want() are left."""
        if now < self.next_claim or len(self.open_pairs) > self.want() // 2:
            return
        claim = self.claim(self.want() - len(self.open_pairs))
        if claim is None:
            self.next_claim = now + CLAIM_RETRY_S
        else:
            self.take(claim.problem_ids)

    def take(self, problem_ids: tuple[int, ...]) -> None:
        """Start on newly claimed problems: settle what is known, compile, queue the rest."""
        progress = finished(self.store, self.plan, self.environments, problem_ids)
        todo: dict[int, list[int]] = {p: [] for p in problem_ids}
        for problem_id, kernel_id in progress.todo:
            todo[problem_id].append(kernel_id)
        for problem_id, kernel_ids in todo.items():
            self.cached[problem_id] = progress.cached[problem_id]
            self.open_pairs[problem_id] = len(kernel_ids)
            self.pending[problem_id] = []
            if not kernel_ids:
                self._problem_finished(problem_id)
            for kernel_id in kernel_ids:
                self._start_pair((problem_id, kernel_id))

    def _start_pair(self, pair: Pair) -> None:
        instance, family = self.plan.instances[pair[1]], self.families[pair[1]]
        if family.compiled:
            reason = family.refusal(instance, self.plan.problems[pair[0]],
                                    self.compiles.target)
            if reason:  # a shape rule, checked here so the pair never reaches a GPU
                self._final(pair, {"status": "unsupported", "message": reason,
                                   **self.policy_row})
                return
            if pair[1] not in self.compiled:
                self.compiled[pair[1]] = self.compiles.request(instance)
        else:  # a library family's answer depends on the worker's libraries: it checks
            self.compiled[pair[1]] = (None, NONE)
        self._compiled(pair, *self.compiled[pair[1]])

    def _compiled(self, pair: Pair, key: str | None, outcome: CompileOutcome | None) -> None:
        """Queue a pair whose instance compiled, record its compile error, or let it wait."""
        if outcome is None:
            self.waiting[key].append(pair)
            self.unsettled[pair[0]] += 1
        elif outcome.ok is False:
            self._final(pair, {"status": "compile_error", "message": outcome.log,
                               **self.policy_row})
        else:
            self.pending[pair[0]].append(pair[1])

    # The loop --------------------------------------------------------------------------
    def run(self) -> None:
        """Measure the job's problems until none is left to claim; JobStopped if the job is
        cancelled or this coordinator's claims were taken over."""
        self.start()
        while True:
            self.top_up(time.monotonic())
            if not self.open_pairs and (self.next_claim > time.monotonic()
                                        or self.writer.job_done):
                break
            self.tick()
        self.flush(force=True)
        self.writer.wait()

    def close(self) -> None:
        """End the writer's thread (after the writes queued before)."""
        if self.writer is not None:
            self.writer.close()

    @property
    def job_done(self) -> bool:
        """A write of this run finished the job."""
        return self.writer is not None and self.writer.job_done

    def tick(self) -> None:
        now = time.monotonic()
        for key, outcome in self.compiles.poll():
            for pair in self.waiting.pop(key, []):
                self.unsettled[pair[0]] -= 1
                self.compiled[pair[1]] = (key, outcome)
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
        elif self.open_pairs:
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
        start_timeout_s: the cluster lost its GPUs. The problems go back to the queue."""
        if any(s.arch in (None, self.arch) for s in self.pool.slots):
            self.unserved_since = None
        elif self.unserved_since is None:
            self.unserved_since = now
        elif now - self.unserved_since > self.config.start_timeout_s:
            raise NoWorkers(f"no measure actor of {self.arch} for "
                            f"{self.config.start_timeout_s:g} s")

    def _next_problem(self, idle: bool) -> int | None:
        """A problem with pairs to send: one whose compiles are all known (a full batch), or,
        for an idle actor, any."""
        fallback = None
        for problem_id, kernel_ids in self.pending.items():
            if kernel_ids:
                if not self.unsettled[problem_id] or len(kernel_ids) >= self.config.max_batch:
                    return problem_id
                fallback = fallback or problem_id
        return fallback if idle else None

    def dispatch(self) -> None:
        for slot in self.pool.ready(self.arch):
            slot.job_id = self.plan.job_id
            while len(slot.batches) < self.config.batches_per_actor:
                problem_id = self._next_problem(idle=not slot.batches)
                if problem_id is None:
                    return
                pending = self.pending[problem_id]
                pending.sort(key=self.order.__getitem__)
                kernel_ids = pending[:self.config.max_batch]
                del pending[:len(kernel_ids)]
                instances = [self.plan.instances[k] for k in kernel_ids]
                modules = tuple(sorted({type(self.families[k]).__module__
                                        for k in kernel_ids}))
                careful = problem_id in self.careful
                gen = slot.actor.measure_batch.remote(self.plan.problems[problem_id],
                                                      instances, self.plan.policy, modules,
                                                      careful)
                slot.batches.append(Batch(problem_id, kernel_ids, gen))
                slot.changed = True

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
            slot.changed = True

    def _take(self, slot: Slot, batch: Batch, chunk: list[dict]) -> bool:
        """Take one chunk of a batch's rows; False if the slot was restarted."""
        batch.since = time.monotonic()
        for item in chunk:
            if "lost" in item:  # the process lost its GPU context and exits: restart it now
                self.careful.add(batch.problem_id)
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
                continue
            kernel_id = batch.kernel_ids[batch.received]
            if self.plan.instances[kernel_id].key != item.pop("key"):
                raise RuntimeError(f"a row came back out of order where {kernel_id} was due")
            batch.received += 1
            item["environment_id"] = slot.environment_id
            item.setdefault("policy", self.policy_row["policy"])
            if item["status"] in RETRIED_STATES:
                self.careful.add(batch.problem_id)
                self._attempt((batch.problem_id, kernel_id), item)
            else:
                self._final((batch.problem_id, kernel_id), item)
        slot.pairs_done += len(chunk)
        slot.changed = True
        return True

    def check_deadlines(self) -> None:
        now = time.monotonic()
        for slot in self.pool.ready(self.arch):
            if slot.batches and now - slot.batches[0].since > self.deadline_s:
                head = slot.batches[0]
                if head.unanswered():
                    self.careful.add(head.problem_id)
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
                self.careful.add(batch.problem_id)
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
        row["problem_id"], row["kernel_id"], row["job_id"] = pair[0], pair[1], self.plan.job_id
        if not row.get("environment_id"):
            row["environment_id"] = self.environment_id
        self.rows.append(row)
        self.delta[0 if row["status"] in SETTLED_STATES else 1] += 1
        self.open_pairs[pair[0]] -= 1
        if self.open_pairs[pair[0]] == 0:
            self._problem_finished(pair[0])

    def _problem_finished(self, problem_id: int) -> None:
        self.finished[problem_id] = self.cached.pop(problem_id)
        del self.open_pairs[problem_id], self.pending[problem_id]
        self.unsettled.pop(problem_id, None)
        self.careful.discard(problem_id)

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

    def abandon(self, release: bool = True) -> None:
        """Stop: cancel what is in flight (a running batch stops after its current pair) and,
        if `release`, give the unfinished problems back for another coordinator."""
        for slot in self.pool.slots:
            self._requeue_slot(slot)
            slot.job_id, slot.measuring = None, None
        self.compiles.cancel()
        if release:
            self.store.release_problems(self.plan.job_id, self.claimer)

    def write_out(self) -> None:
        """Write what was measured (before the problems are given back); JobStopped if the
        claims ended meanwhile."""
        if self.writer is not None and self.writer.thread.is_alive():
            self.flush(force=True)
            self.writer.wait()

    # Writes ----------------------------------------------------------------------------
    def held(self) -> frozenset[int]:
        """The problems this run holds in the database (finished ones until written)."""
        return frozenset(self.open_pairs) | frozenset(self.finished)

    def flush(self, force: bool = False) -> None:
        """Hand the rows to the writer (a full batch, or every flush_s), else a heartbeat."""
        now = time.monotonic()
        self.writer.check()
        if (self.rows or self.finished) and (
                force or len(self.rows) >= self.config.flush_rows
                or now - self.last_flush >= self.config.flush_s):
            cached = sum(self.finished.values())
            self.writer.submit(Write(self.rows, *self.delta, finished=self.finished,
                                     held=self.held()))
            self.measured += len(self.rows)
            self.counts[0] += self.delta[0]
            self.counts[1] += self.delta[1]
            self.counts[2] += cached
            self.rows, self.delta, self.finished = [], [0, 0], {}
            self.last_flush = self.last_beat = now
            self.reporter.job_progress(self.plan.job_id, *self.counts)
        elif now - self.last_beat >= self.config.heartbeat_s:
            self.writer.submit(Write([], 0, 0, held=self.held()))
            self.last_beat = now

    def store_workers(self, force: bool = False) -> None:
        """Write the workers' states for `farm workers` (at most once a second)."""
        now = time.monotonic()
        if force or now - self.last_workers >= 1.0:
            self.last_workers = now
            for slot in self.pool.slots:
                self._show(slot)
            rows = self.pool.worker_rows(force)
            if rows:
                self.store.save_workers(rows)

    def _show(self, slot: Slot) -> None:
        """What the slot is measuring now, for `farm workers`."""
        head = slot.batches[0] if slot.batches else None
        if head is None or not head.unanswered():
            measuring = None
        else:
            instance = self.plan.instances[head.unanswered()[0]]
            measuring = (f"job {self.plan.job_id}: {instance.name} on "
                         f"{self.plan.problems[head.problem_id].label()}")
        if measuring != slot.measuring:
            slot.measuring, slot.changed = measuring, True
