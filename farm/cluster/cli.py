"""The cluster's commands of `farm`: run, workers, record, merge-recordings,
import-recording, demo (registered by farm/cli.py)."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from farm.cluster.config import CoordinatorConfig, QuietReporter
from farm.console import DbOption, err, farm_errors, out
from farm.store import open_store
from farm.store.models import utcnow

SILENT_S = 60.0  # a worker row older than this belongs to a coordinator that is gone

RayOption = Annotated[Optional[str], typer.Option(
    "--ray-address", envvar="FARM_RAY_ADDRESS",
    help="Ray cluster to join (default: start a local Ray in this process)")]
ReplayOption = Annotated[Optional[Path], typer.Option(
    "--replay", help="Replay this recording (default on a machine with no GPU: every "
                     "recording in jobs/recordings/ of the newest recorded GPU of --arch)")]
ActorsOption = Annotated[int, typer.Option("--replay-actors",
                                           help="Replay actors standing in for GPUs")]
PaceOption = Annotated[float, typer.Option("--replay-pace",
                                           help="Seconds per replayed pair (a GPU's pace)")]
ArchOption = Annotated[Optional[str], typer.Option(
    "--arch", help="Serve jobs on this architecture (default: the one with the most GPUs)")]


def _config(ray_address, replay, replay_actors, replay_pace, arch, **more) -> CoordinatorConfig:
    return CoordinatorConfig(ray_address=ray_address, replay=str(replay) if replay else None,
                             replay_actors=replay_actors, replay_pace_s=replay_pace, arch=arch,
                             **more)


def stop_on_sigterm() -> None:
    """SIGTERM stops the coordinator as Ctrl-C does: its unfinished problems go back to the
    queue for another coordinator (a container or service manager stops it this way)."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


def run(until_idle: Annotated[bool, typer.Option(
            "--until-idle", help="Return when the queue is empty (else serve new jobs)")] = False,
        job: Annotated[list[int], typer.Option("--job", help="Only these jobs")] = [],
        ray_address: RayOption = None, replay: ReplayOption = None, replay_actors: ActorsOption = 2,
        replay_pace: PaceOption = 0.0, arch: ArchOption = None,
        hang_slack: Annotated[float, typer.Option(
            help="Seconds beyond 2x the policy's timeout before a silent pair is a hang")] = 60.0,
        stale_after: Annotated[float, typer.Option(
            help="Seconds without a heartbeat before another coordinator may take a job")] = 60.0,
        max_batch: Annotated[int, typer.Option(help="Pairs per batch")] = 64,
        retrain: Annotated[bool, typer.Option(
            help="Train selection models in the background when an operator/arch/dtype's "
                 "measurements grew 20% since its model")] = True,
        retrain_every: Annotated[Optional[float], typer.Option(
            help="Also retrain when a model is this many seconds old and new measurements "
                 "exist")] = None,
        active_batch: Annotated[int, typer.Option(
            help="After each training, queue this many generated shapes where the model is "
                 "unsure or was wrong (active sampling; 0: off)")] = 0,
        active_rounds: Annotated[int, typer.Option(
            help="Active-sampling jobs per operator/arch/dtype at most")] = 3,
        active_shapes: Annotated[Optional[Path], typer.Option(
            help="Choose the active-sampling shapes of this spec's operator and dtype from "
                 "the spec's problems (else from generated shapes)")] = None,
        quiet: Annotated[bool, typer.Option(help="No progress bars")] = False,
        db: DbOption = None) -> None:
    """The coordinator: measure queued jobs on every GPU of the Ray cluster (or replay)."""
    from farm.cluster.coordinator import Coordinator, NoWorkers
    from farm.cluster.progress import ProgressBars
    from farm.recording import RecordingError
    from farm.specs import SpecError

    config = _config(ray_address, replay, replay_actors, replay_pace, arch,
                     hang_slack_s=hang_slack, stale_after_s=stale_after, max_batch=max_batch,
                     retrain=retrain, retrain_every_s=retrain_every,
                     active_batch=active_batch, active_rounds=active_rounds,
                     active_shapes=str(active_shapes) if active_shapes else None)
    with farm_errors():
        store = open_store(db)
    reporter = QuietReporter() if quiet else ProgressBars(err)
    stop_on_sigterm()
    try:
        if quiet:
            outcomes = Coordinator(store, config, reporter).run(until_idle, only=job or None)
        else:
            with reporter:
                outcomes = Coordinator(store, config, reporter).run(until_idle,
                                                                    only=job or None)
    except (NoWorkers, RecordingError, SpecError) as exc:
        err.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        err.print("interrupted: the problems in progress went back to the queue")
        raise typer.Exit(130) from None
    for o in outcomes:
        out.print(f"job {o.job_id} {o.name}: {o.status}, {o.done} ok or unsupported, "
                  f"{o.failed} failed, {o.cached} cached of {o.total}; {o.measured} measured in "
                  f"{o.seconds:.1f} s"
                  + (f" ({o.error})" if o.error else ""), highlight=False)
    if any(o.status == "failed" for o in outcomes):
        raise typer.Exit(1)


def workers(all_: Annotated[bool, typer.Option("--all", help="Include stopped workers")] = False,
            db: DbOption = None
            ) -> None:
    """The measure processes (one per GPU): their state and what each is measuring."""
    with farm_errors():
        rows = open_store(db).workers(include_stopped=all_)
    if not rows:
        out.print("no workers: `farm run` starts one per GPU" + ("" if all_ else
                  " (`farm workers --all` shows stopped ones)"))
        return
    now = utcnow()
    table = Table("worker", "kind", "device", "arch", "state", "job", "measuring", "pairs",
                  "restarts", "seen")
    for w in rows:
        seen = now - (w.updated_at if w.updated_at.tzinfo else w.updated_at.replace(
            tzinfo=now.tzinfo))
        silent = w.state != "stopped" and seen.total_seconds() > SILENT_S
        table.add_row(w.name, w.kind, w.gpu_name, w.arch,
                      f"{w.state} (coordinator silent)" if silent else w.state,
                      str(w.job_id or ""), w.measuring or "", str(w.pairs_done),
                      str(w.restarts), f"{seen.total_seconds():.0f} s ago")
    out.print(table)


def record(jobs: Annotated[list[int], typer.Argument(help="Finished job ids")],
           out_path: Annotated[Path, typer.Option("--out", help="Parquet file to write, e.g. "
                                                  "jobs/recordings/h100-standard.parquet")],
           environment: Annotated[Optional[str], typer.Option(
               help="Environment fingerprint, where the jobs ran in several")] = None,
           note: Annotated[str, typer.Option(help="A line saying what was recorded")] = "",
           db: DbOption = None
           ) -> None:
    """Export finished jobs' GPU measurements (with their environment) for the replay device."""
    from farm.recording import RecordingError, export_recording, read_recording

    with farm_errors():
        store = open_store(db)
    try:
        path = export_recording(store, jobs, out_path, environment, note)
    except RecordingError as exc:
        err.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    recording = read_recording(path)
    out.print(f"wrote {len(recording.frame)} pairs of {recording.environment['gpu_name']} "
              f"({recording.arch}) to {path}", highlight=False)


def merge_recordings(
        sources: Annotated[list[Path], typer.Argument(help="Recordings of one environment")],
        out_path: Annotated[Path, typer.Option("--out", help="Parquet file to write")],
        note: Annotated[str, typer.Option(help="A line saying what was recorded (default: "
                                               "the recordings' notes)")] = ""
        ) -> None:
    """Merge recordings of one GPU environment (e.g. one sweep's per-job files) into one file; a
    pair measured in several keeps the last file's row."""
    from farm.recording import RecordingError, merge_recordings as merge

    try:
        merged = merge(list(sources), out_path, note)
    except RecordingError as exc:
        err.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    again = f" ({merged.remeasured} pairs measured again: the later file's kept)" \
        if merged.remeasured else ""
    out.print(f"wrote {merged.rows} pairs of {merged.jobs} jobs to {merged.path}{again}",
              highlight=False)


def import_recording(path: Annotated[Path, typer.Argument(help="Recording (parquet) to load")],
                     db: DbOption = None
                     ) -> None:
    """Load a recording's measurements into the database under the recorded GPU's environment
    (they are that GPU's measurements, not a replay), e.g. to train selection models on them."""
    from farm.recording import RecordingError, import_recording as load

    with farm_errors():
        store = open_store(db)
    try:
        written = load(store, path)
    except RecordingError as exc:
        err.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    for name, rows in written.items():
        out.print(f"{name}: {rows} pairs", highlight=False)


def demo(replay: ReplayOption = None, replay_actors: ActorsOption = 2,
         replay_pace: PaceOption = 0.0, arch: ArchOption = None,
         spec: Annotated[list[Path], typer.Option(
             "--spec", help="Run these specs instead of the demo sweep")] = [],
         rows: Annotated[int, typer.Option(help="Shapes shown per job")] = 12,
         ray_address: RayOption = None,
         db: DbOption = None) -> None:
    """The standard convolution sweep and the group-norm networks end to end on this machine
    (GPUs, or the replay device), summarized."""
    from farm.cluster.coordinator import NoWorkers
    from farm.cluster.demo import DEMO_SWEEP, run_demo
    from farm.cluster.progress import ProgressBars
    from farm.recording import RecordingError

    config = _config(ray_address, replay, replay_actors, replay_pace, arch)
    with farm_errors():
        store = open_store(db)
        try:
            outcomes = run_demo(store, config, out, ProgressBars(err),
                                tuple(spec) or DEMO_SWEEP, rows)
        except (NoWorkers, RecordingError) as exc:
            err.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
            raise typer.Exit(1) from None
    if any(o.status != "done" for o in outcomes):
        raise typer.Exit(1)
