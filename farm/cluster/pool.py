"""The measure actors of one coordinator, kept in step with the cluster.

GPU mode: one actor per GPU of every live node (num_gpus=1, pinned to its node), created as
nodes join, killed when their node leaves. Replay mode (no GPU): a fixed number of replay
actors (num_gpus=0), spread over the cluster's nodes. Every actor has max_restarts=-1 and max_task_retries=0: Ray restarts a
process that died, and the coordinator, not Ray, decides what to resend.

A slot is ready once its describe() call answered from a live process; after a death or a kill
it is restarting until the restarted process answers. Work goes only to ready slots.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.exceptions import ActorDiedError, RayActorError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from farm.cluster.actor import MeasureActor, WorkerConfig
from farm.store import Queries
from farm.store.models import utcnow

PING_RETRY_S = 0.3
MAX_START_FAILURES = 3
REFRESH_S = 15.0  # workers rows are rewritten at least this often


def _reason(exc: Exception) -> str:
    """The useful line of an actor's death: the constructor's exception where there is one."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    errors = [line for line in lines if "Error" in line and not line.startswith("File ")]
    return (errors[-1] if errors else lines[0] if lines else type(exc).__name__)[:300]


class Batch:
    """Pairs of one problem sent to one actor as one streaming call (measure_batch)."""

    def __init__(self, problem_id: int, kernel_ids: list[int], gen: Any) -> None:
        self.problem_id, self.kernel_ids, self.gen = problem_id, kernel_ids, gen
        self.received = 0  # rows come back in order: kernel_ids[:received] are answered
        self.since = time.monotonic()  # the last sign of progress

    def unanswered(self) -> list[int]:
        return self.kernel_ids[self.received:]


@dataclass(eq=False)
class Slot:
    """One actor and what the coordinator knows of it (mutable bookkeeping, not a record)."""

    name: str
    actor: Any
    node_id: str | None
    state: str = "starting"  # starting | ready | restarting
    info: dict[str, Any] = field(default_factory=dict)
    environment_id: int | None = None
    ping: Any = None
    ping_at: float = 0.0
    batches: deque[Batch] = field(default_factory=deque)  # sent, the oldest (running) first
    restarts: int = 0
    pairs_done: int = 0
    job_id: int | None = None
    measuring: str | None = None
    started_at: Any = field(default_factory=utcnow)
    changed: bool = True

    @property
    def arch(self) -> str | None:
        return self.info.get("environment", {}).get("arch")


class ActorPool:
    def __init__(self, store: Queries, coordinator: str, config: WorkerConfig,
                 replay_actors: int = 2) -> None:
        self.store, self.coordinator, self.config = store, coordinator, config
        self.replay_actors = replay_actors
        self.slots: list[Slot] = []
        self.failures: list[str] = []  # why actors could not start
        self.removed: list[Slot] = []  # slots dropped since the last poll_removed()
        self._failed: dict[str | None, int] = {}  # node -> actors that could not start
        self._count = 0
        self._refreshed = time.monotonic()
        self._environments: dict[str, int] = {}

    # Membership ------------------------------------------------------------------------
    def _spawn(self, node_id: str | None) -> None:
        if self._failed.get(node_id, 0) >= MAX_START_FAILURES:
            return  # this node cannot run a measure actor; the failures say why
        options: dict[str, Any] = {"max_restarts": -1, "max_task_retries": 0, "num_cpus": 0}
        if self.config.kind == "gpu":
            options["num_gpus"] = 1
            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id, soft=False)
        else:  # replay actors stand in for the GPUs of several nodes: spread them out
            options["num_gpus"], options["scheduling_strategy"] = 0, "SPREAD"
        actor = ray.remote(MeasureActor).options(**options).remote(self.config)
        self._count += 1
        slot = Slot(name=f"{self.coordinator}/{self._count}", actor=actor, node_id=node_id)
        self.slots.append(slot)
        self._ping(slot)

    def sync(self) -> None:
        """Match the actors to the cluster: one per GPU of each live node (ray.nodes(), whose
        GPU resources sum to ray.cluster_resources()["GPU"]), or the replay count."""
        if self.config.kind == "replay":
            for _ in range(self.replay_actors - len(self.slots)):
                self._spawn(None)
            return
        alive = {n["NodeID"]: int(n.get("Resources", {}).get("GPU", 0))
                 for n in ray.nodes() if n.get("Alive")}
        for slot in list(self.slots):
            if slot.node_id not in alive:
                self.remove(slot)
        for node_id, gpus in alive.items():
            have = sum(s.node_id == node_id for s in self.slots)
            for _ in range(gpus - have):
                self._spawn(node_id)

    def remove(self, slot: Slot) -> None:
        try:
            ray.kill(slot.actor, no_restart=True)
        except Exception:  # noqa: BLE001 - it may be gone already
            pass
        if slot in self.slots:
            self.slots.remove(slot)
            self.removed.append(slot)

    def poll_removed(self) -> list[Slot]:
        """The slots dropped since the last call (their batches need sending elsewhere)."""
        removed, self.removed = self.removed, []
        return removed

    def shutdown(self) -> None:
        for slot in list(self.slots):
            self.remove(slot)
        self.removed.clear()

    # Readiness -------------------------------------------------------------------------
    def _ping(self, slot: Slot, delay_s: float = 0.0) -> None:
        slot.ping, slot.ping_at = None, time.monotonic() + delay_s

    def restart(self, slot: Slot, kill: bool) -> None:
        """The slot's process died or must die (hang, lost context): Ray restarts it."""
        if kill:
            try:
                ray.kill(slot.actor, no_restart=False)
            except Exception:  # noqa: BLE001
                pass
        if slot.state != "restarting":
            slot.restarts += 1
        slot.state, slot.measuring, slot.changed = "restarting", None, True
        self._ping(slot, PING_RETRY_S)

    def poll(self) -> list[Slot]:
        """Send due pings and take their answers; returns the slots that became ready."""
        now, ready = time.monotonic(), []
        for slot in list(self.slots):
            if slot.state == "ready":
                continue
            if slot.ping is None:
                if now >= slot.ping_at:
                    slot.ping = slot.actor.describe.remote()
                continue
            done, _ = ray.wait([slot.ping], timeout=0)
            if not done:
                continue
            try:
                info = ray.get(slot.ping)
            except ActorDiedError as exc:  # gone for good: its constructor failed, or killed
                self.failures.append(_reason(exc))
                if slot.state == "starting":
                    self._failed[slot.node_id] = self._failed.get(slot.node_id, 0) + 1
                self.remove(slot)
                continue
            except RayActorError:  # unavailable for now (restarting): ask again
                self._ping(slot, PING_RETRY_S)
                continue
            if info["lost"]:  # the old process answered before it exited
                self._ping(slot, PING_RETRY_S)
                continue
            slot.info, slot.state, slot.ping, slot.changed = info, "ready", None, True
            slot.environment_id = self.environment_id(info)
            ready.append(slot)
        return ready

    def environment_id(self, info: dict[str, Any]) -> int:
        fingerprint = info["fingerprint"]
        if fingerprint not in self._environments:
            self._environments[fingerprint] = self.store.environment_id(
                fingerprint, **info["environment"])
        return self._environments[fingerprint]

    def environment_ids(self, arch: str | None = None) -> list[int]:
        return list(dict.fromkeys(s.environment_id for s in self.slots
                                  if s.environment_id is not None and arch in (None, s.arch)))

    def ready(self, arch: str | None = None) -> list[Slot]:
        return [s for s in self.slots if s.state == "ready" and arch in (None, s.arch)]

    def wait_ready(self, timeout_s: float) -> list[Slot]:
        """Wait until every actor answered (or timeout_s passed); the ready slots."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.poll()
            if self.slots and all(s.state == "ready" for s in self.slots):
                break
            time.sleep(0.05)
        return self.ready()

    # For `farm workers` ----------------------------------------------------------------
    def worker_rows(self, force: bool = False) -> list[dict[str, Any]]:
        """Rows for the workers table: the slots that changed, or all (force, or every
        REFRESH_S, so a coordinator that died leaves rows visibly old)."""
        now = time.monotonic()
        if now - self._refreshed >= REFRESH_S:
            force, self._refreshed = True, now
        rows = []
        for slot in self.slots:
            if not (slot.changed or force):
                continue
            env = slot.info.get("environment", {})
            state = slot.state if slot.state != "ready" else (
                "measuring" if slot.batches else "idle")
            rows.append({"name": slot.name, "coordinator": self.coordinator,
                         "kind": self.config.kind, "node": (slot.node_id or
                                                             slot.info.get("node") or "")[:64],
                         "gpu_name": env.get("gpu_name", "?"), "arch": env.get("arch", "?"),
                         "state": state, "job_id": slot.job_id,
                         "measuring": (slot.measuring or None) and slot.measuring[:400],
                         "pairs_done": slot.pairs_done, "restarts": slot.restarts,
                         "started_at": slot.started_at, "updated_at": utcnow()})
            slot.changed = False
        return rows
