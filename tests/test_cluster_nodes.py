"""The farm on a Ray cluster of three nodes on this machine (loopback only): a head and two more
nodes, each its own `ray start`, token authentication on, a PostgreSQL server, two coordinator
processes with replay actors standing in for GPUs. A node is killed (SIGKILL to its raylet) and
a coordinator stopped (SIGTERM) mid-job; three jobs still finish with every pair measured
exactly once."""

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from farm.store import open_store
from tests.cluster_support import (MEDIUM, assert_complete_exactly_once, job_rows, recording,
                                   spec, submit)
from tests.ray_nodes import RayNodes

pytestmark = pytest.mark.postgres


def _coordinator(nodes: RayNodes, db_url: str, rec: str, log: Path) -> subprocess.Popen:
    env = {**nodes.env, "FARM_RAY_ADDRESS": nodes.address, "FARM_DB_URL": db_url}
    return subprocess.Popen([sys.executable, "-m", "farm.cli", "run", "--quiet", "--replay", rec,
                             "--replay-actors", "3", "--replay-pace", "0.25",
                             "--stale-after", "30", "--no-retrain"],
                            env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)


def _wait(condition, timeout_s: float, what: str, procs=()) -> None:
    begin = time.monotonic()
    while not condition():
        for proc in procs:
            assert proc.poll() is None, f"a coordinator exited early ({what})"
        assert time.monotonic() - begin < timeout_s, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_three_nodes_two_coordinators_a_dead_node_and_a_stopped_coordinator(pg_url, tmp_path):
    nodes = RayNodes()
    nodes.env["FARM_CODE_CACHE"] = str(tmp_path / "code-cache")
    coordinators: list[subprocess.Popen] = []
    try:
        nodes.start_head(cpus=1)
        nodes.add_node("w1", cpus=1)
        nodes.add_node("w2", cpus=1)
        store = open_store(pg_url, migrate=True)
        every = spec("all", {**MEDIUM, "N": [1, 2, 3]})
        rec = recording(every, tmp_path)
        jobs = [submit(store, spec(f"n{n}", {**MEDIUM, "N": [n]}), tmp_path) for n in (1, 2, 3)]
        logs = [tmp_path / "a.log", tmp_path / "b.log"]
        coordinators = [_coordinator(nodes, pg_url, rec, log) for log in logs]
        rows = lambda: sum(job_rows(store, j) for j in jobs)  # noqa: E731

        _wait(lambda: rows() >= 30, 240, "the first rows", coordinators)
        assert len(set(store.running_claims())) == 2  # both coordinators hold problems
        ids = nodes.node_ids()
        hosts = lambda: {w.node for w in store.workers()}  # noqa: E731 - where actors run
        # the actors spread over the nodes (SPREAD), those of the two added nodes registering
        # later than the head's when their workers start slower: wait for one
        _wait(lambda: any(ids[n] in hosts() for n in ("w1", "w2")), 120,
              "a replay actor on an added node", coordinators)
        workers = store.workers()
        [victim, *_] = [n for n in ("w2", "w1")  # a node with actors
                        if ids[n] in {w.node for w in workers}]
        # the coordinator that keeps running is one with actors on that node, so that it is
        # there to restart them whenever Ray reports the node dead
        owners = {int(w.coordinator.split(":")[1]) for w in workers if w.node == ids[victim]}
        coordinators.sort(key=lambda proc: proc.pid in owners)  # an owner last: `other`
        nodes.kill_node(victim)
        after_kill = rows()
        _wait(lambda: rows() >= after_kill + 30, 240, "progress after the node died",
              coordinators)
        # a coordinator has met the dead node's actors and restarted them while work remains
        # (the surviving node may otherwise finish the jobs before Ray declares the node dead)
        restarts = lambda: sum(w.restarts for w in store.workers(include_stopped=True))  # noqa: E731
        _wait(lambda: restarts() >= 1, 240, "the dead node's actors restarted", coordinators)

        stopped, other = coordinators
        held = set(store.running_claims())
        stopped.send_signal(signal.SIGTERM)
        assert stopped.wait(60) == 130
        assert len(set(store.running_claims())) <= 1 and set(store.running_claims()) <= held
        _wait(lambda: all(store.job(j).status == "done" for j in jobs), 300,
              "every job done", [other])
        other.send_signal(signal.SIGTERM)
        other.wait(60)

        for job in jobs:
            assert_complete_exactly_once(store, job)
        assert store.count_rows("measurements") == 3 * 72
        assert store.running_claims() == [] and store.jobs_with_open_problems() == []
        # the replay actors of the dead node were restarted on the others
        assert sum(w.restarts for w in store.workers(include_stopped=True)) >= 1
    except BaseException:
        for log in tmp_path.glob("*.log"):
            print(f"--- {log.name}\n{log.read_text()[-3000:]}")
        raise
    finally:
        for proc in coordinators:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        nodes.stop()
