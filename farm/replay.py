"""The replay device: a worker with no GPU that serves a recording's measurements through the
GpuWorker interface, so the whole farm (coordinator, actors, store) runs on any machine.

Its rows carry an environment named "replay of <GPU>" whose replay_of is the recorded
environment's fingerprint, so they never mix with real measurements (TimingFilter's
include_replay). A pair the recording lacks, or recorded from a different kernel source, is
`not_recorded`, unless the rules of its compiled family refuse it on the recorded GPU's target:
those need no GPU, so it is `unsupported` as on the GPU (a library call's rules depend on the
host that ran it, so a missing vendor pair stays not_recorded). A recorded fault plays out as
on the GPU: "exit" yields the pair's launch_error and raises DeviceLost (the actor process
exits), "hang" sleeps until the coordinator kills it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from farm.environment import Environment
from farm.measure import DeviceLost, PairResult
from farm.problems import Problem
from farm.recording import (TIMING_FIELDS, Recording, RecordingError, cell, read_recording,
                            replay_environment, row_problem)
from farm.timing import TimingPolicy
from farm.worker import target_of
from kernels.family import Instance
from kernels.registry import get_family


class ReplayWorker:
    """Serves recorded pairs of one environment, from one recording or several (where two hold
    the same pair, the first given wins); `pace_s` sleeps per pair to stand in for a GPU's
    pace."""

    def __init__(self, recordings: str | Path | Recording | Sequence[str | Path | Recording],
                 pace_s: float = 0.0, hang_s: float = 3600.0) -> None:
        if isinstance(recordings, (str, Path, Recording)):
            recordings = [recordings]
        loaded = [r if isinstance(r, Recording) else read_recording(r) for r in recordings]
        if not loaded:
            raise RecordingError("no recording to replay")
        first = loaded[0]
        for other in loaded[1:]:
            if other.environment.get("fingerprint") != first.environment.get("fingerprint"):
                raise RecordingError(f"{other.path} was recorded in another environment than "
                                     f"{first.path}; replay one environment at a time")
        self.environment: Environment = replay_environment(first.environment)
        self.target = target_of({"arch": first.arch})
        self.pace_s, self.hang_s = pace_s, hang_s
        self._rows: dict[tuple[str, str, str], dict[str, Any]] = {}
        self._policies: dict[str | None, dict[str, Any]] = {}
        keys: dict[tuple[str, str, str, str], str] = {}  # a problem's key, computed once
        for recording in loaded:
            for row in recording.frame.to_dict("records"):
                identity = (row["operator"], row["dtype"], row["layout"], row["shape"])
                key = keys.get(identity)
                if key is None:
                    key = keys[identity] = row_problem(row).key
                self._rows.setdefault((row["family"], row["instance"], key), row)

    def _policy(self, text: str | None) -> dict[str, Any]:
        """A recorded policy, parsed once (rows share a few; read, never changed)."""
        if text not in self._policies:
            self._policies[text] = json.loads(text or "{}")
        return self._policies[text]

    def _result(self, row: dict[str, Any]) -> PairResult:
        return PairResult(status=row["status"], message=cell(row["message"]),
                          policy=self._policy(row["policy"]),
                          telemetry=json.loads(row["telemetry"] or "{}"),
                          **{f: cell(row[f]) for f in TIMING_FIELDS if f != "samples"},
                          samples=int(cell(row["samples"]) or 0))

    def measure_problem(self, problem: Problem, instances: Iterable[Instance],
                        policy: TimingPolicy = TimingPolicy(),
                        seed: int = 1) -> Iterator[tuple[Instance, PairResult]]:
        """GpuWorker.measure_problem's contract: yields each pair; DeviceLost after a fatal one."""
        for instance in instances:
            if self.pace_s:
                time.sleep(self.pace_s)
            row = self._rows.get((instance.family, instance.name, problem.key))
            if row is None or row["source_hash"] != instance.source_hash:
                family = get_family(instance.family)
                reason = family.compiled and family.refusal(instance, problem, self.target)
                if reason:
                    yield instance, PairResult("unsupported", message=reason,
                                               policy=policy.model_dump())
                    continue
                why = ("the recording has no measurement of this pair" if row is None else
                       f"recorded from source {row['source_hash']}, the instance's source is "
                       f"now {instance.source_hash}")
                yield instance, PairResult("not_recorded", message=f"{why} ("
                                           f"{self.environment.gpu_name})",
                                           policy=policy.model_dump())
                continue
            fault = cell(row.get("fault"))
            if fault == "hang":
                time.sleep(self.hang_s)  # the coordinator's deadline ends this process
                yield instance, PairResult("timeout", message="replayed hang",
                                           policy=policy.model_dump())
                raise DeviceLost("timeout: replayed hang")
            result = self._result(row)
            yield instance, result
            if fault == "exit":
                raise DeviceLost(f"launch_error: {result.message or 'replayed fatal fault'}")
