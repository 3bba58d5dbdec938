"""The `farm` command. Each subcommand parses its arguments and calls farm.api or farm.store."""

from __future__ import annotations

import os
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from farm import api
from farm.choices import check_operator, check_target, parse_shape
from farm.console import DbOption, err, farm_errors, out
from farm.specs import load_spec
from farm.store import TimingFilter, describe, default_url, open_store
from farm.store import db as dbmod

app = typer.Typer(help="A benchmarking farm for GPU kernels.", no_args_is_help=True,
                  pretty_exceptions_enable=False)
db_app = typer.Typer(help="Database maintenance.", no_args_is_help=True)
query_app = typer.Typer(help="Query historical results.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(query_app, name="query")


@db_app.command("upgrade")
def db_upgrade(db: DbOption = None) -> None:
    """Apply the migrations to the database."""
    with farm_errors():
        engine = dbmod.make_engine(db)
        dbmod.upgrade(engine)
        out.print(f"{describe(str(engine.url))} is at revision {dbmod.current_revision(engine)}")


@db_app.command("current")
def db_current(db: DbOption = None) -> None:
    """Show the database's revision and the code's."""
    with farm_errors():
        engine = dbmod.make_engine(db)
        out.print(f"database {describe(str(engine.url))}: {dbmod.current_revision(engine)}, "
                  f"code: {dbmod.head_revision(engine)}")


@app.command()
def submit(spec: Annotated[Path, typer.Argument(help="Sweep spec (YAML)")],
           dry_run: Annotated[bool, typer.Option(help="Validate only, queue nothing")] = False,
           db: DbOption = None) -> None:
    """Validate a sweep spec and queue it as a job; prints the job id."""
    with farm_errors():
        resolved = load_spec(spec)
        note = f" ({resolved.dropped} generated combinations dropped)" if resolved.dropped else ""
        if dry_run:
            out.print(f"{spec}: valid, {len(resolved.problems)} problems{note}")
            return
        job_id = api.queue(resolved, open_store(db))
        err.print(f"queued job {job_id}: {resolved.spec.name}, {resolved.spec.operator} "
                  f"{resolved.spec.dtype}, {len(resolved.problems)} problems{note}")
        print(job_id)


def _job_table(jobs) -> Table:
    table = Table("id", "name", "operator", "dtype", "status", "prio", "problems",
                  "pairs finished/total", "failed", "cached", "created")
    for job in jobs:
        table.add_row(str(job.id), job.name, job.operator, job.dtype, job.status,
                      str(job.priority), str(job.problems),
                      f"{job.finished_pairs}/{job.total_pairs}", str(job.failed_pairs),
                      str(job.cached_pairs), job.created_at.strftime("%Y-%m-%d %H:%M"))
    return table


@app.command()
def status(job: Annotated[Optional[int], typer.Argument(help="Job id (default: recent jobs)")] = None,
           db: DbOption = None) -> None:
    """Show one job or the most recent ones."""
    with farm_errors():
        jobs = api.status(job, open_store(db))
        if not jobs:
            out.print(f"no jobs in {describe(db or default_url())}: queue one with "
                      "`farm submit SPEC`")
            return
        out.print(_job_table(jobs))
        if job is not None and jobs[0].error:
            out.print(f"error: {jobs[0].error}")


@app.command()
def cancel(job: Annotated[int, typer.Argument(help="Job id")], db: DbOption = None) -> None:
    """Stop a job's remaining pairs (finished pairs stay recorded)."""
    with farm_errors():
        summary = api.cancel(job, open_store(db))
        out.print(f"job {job} is {summary.status}")


@app.command("compile")
def compile_(op: Annotated[str, typer.Option("--op", help="Operator")],
             target: Annotated[str, typer.Option(help="sm_90a (NVRTC) or gfx90a (hipRTC)")],
             family: Annotated[Optional[str], typer.Option(help="Only this family")] = None,
             dtype: Annotated[list[str], typer.Option(help="Element types")] = ["bf16", "fp16"],
             no_cache: Annotated[bool, typer.Option(help="Compile even if cached")] = False,
             jobs: Annotated[int, typer.Option("--jobs", "-j", help="Parallel compiles")] =
             os.cpu_count() or 1) -> None:
    """Compile every instance of an operator for a target, warming the cache."""
    from farm.compile import FolderCache
    from farm.compile_all import compile_instances, instances_of
    from farm.gpu import RuntimeUnavailable
    from kernels import UnknownFamily
    from kernels.registry import get_family

    with farm_errors():
        check_operator(op)
        check_target(target)
    try:
        if family and (reason := get_family(family).unsupported_target(target)):
            raise ValueError(reason)
        instances = instances_of(op, dtype, family, target)
        summary = compile_instances(instances, target, None if no_cache else FolderCache(),
                                    workers=jobs)
    except (UnknownFamily, RuntimeUnavailable, ValueError) as exc:
        err.print(f"[bold red]error:[/] {exc}", highlight=False)
        raise typer.Exit(2) from None
    for failure in summary.failures:
        err.print(f"[red]failed[/] {failure.instance}:\n{failure.log.strip()}", highlight=False)
    out.print(f"{op} for {target}: {summary.instances} instances ({summary.code_objects} "
              f"distinct code objects), {summary.compiled} compiled ({summary.cached} from the "
              f"cache or a twin), {len(summary.failures)} failed, "
              f"{summary.seconds:.1f} s")
    if summary.failures or not summary.instances:
        raise typer.Exit(1)


@app.command()
def operators() -> None:
    """The operators the farm knows: shape fields (optional ones with their default), the
    kernel families that serve each, and where its real-network problem sets are."""
    from kernels.registry import families_for
    from kernels.registry import operators as known

    table = Table("operator", "shape fields", "families", "network sets")
    for name, spec in sorted(known().items()):
        record = spec.problem_type
        fields = [f"{f}={record.DEFAULTS[f]}" if f in record.DEFAULTS else f
                  for f in record.FIELDS]
        sets = spec.networks_dir
        table.add_row(name, " ".join(fields), ", ".join(f.name for f in families_for(name)),
                      str(sets.relative_to(Path.cwd())) if sets and sets.is_relative_to(
                          Path.cwd()) else str(sets or ""))
    out.print(table)


@app.command()
def devices() -> None:
    """The GPUs of this machine and the runtimes installed."""
    from farm.gpu import available_runtimes, list_devices

    found = list_devices()
    runtimes = ", ".join(available_runtimes()) or "none"
    if not found:
        out.print(f"no GPU here (runtimes installed: {runtimes})")
        return
    table = Table("runtime", "ordinal", "name", "arch", "SMs", "memory GiB")
    for d in found:
        table.add_row(d["runtime"], str(d["ordinal"]), d["name"], d["arch"], str(d["sm_count"]),
                      f"{d['memory'] / 2**30:.0f}")
    out.print(table)


class Format(str, Enum):
    table = "table"
    csv = "csv"
    json = "json"
    parquet = "parquet"


@query_app.command("timings")
def query_timings(
        op: Annotated[Optional[str], typer.Option("--op", help="Operator")] = None,
        dtype: Annotated[Optional[str], typer.Option(help="bf16 | fp16 | fp32")] = None,
        device: Annotated[Optional[str], typer.Option(help="GPU name part or architecture")] = None,
        family: Annotated[Optional[str], typer.Option(help="Kernel family")] = None,
        kernel: Annotated[Optional[str], typer.Option(help="Kernel instance name")] = None,
        status: Annotated[str, typer.Option(help="Measurement status, or 'any'")] = "ok",
        job: Annotated[Optional[int], typer.Option(help="Job id")] = None,
        shape: Annotated[list[str], typer.Option(help="FIELD=VALUE of the operator's shape "
                                                       "fields, repeatable or comma-separated "
                                                       "(N=32,G=32 or layout=nchw)")] = [],
        replay: Annotated[bool, typer.Option(help="Include replayed rows")] = True,
        limit: Annotated[Optional[int], typer.Option(help="At most this many rows")] = None,
        format: Annotated[Format, typer.Option(help="Output format")] = Format.table,
        output: Annotated[Optional[Path], typer.Option(help="Write to this file")] = None,
        db: DbOption = None) -> None:
    """Historical timings with typed filters."""
    with farm_errors():
        if op is not None:
            check_operator(op)
        fields = parse_shape(shape, op)
    where = TimingFilter(operator=op, dtype=dtype, device=device, family=family, kernel=kernel,
                         status=None if status == "any" else status, job_id=job,
                         shape=fields, include_replay=replay, limit=limit)
    with farm_errors():
        frame = api.timings(where, open_store(db))
    if format is Format.parquet and output is None:
        raise typer.BadParameter("parquet needs --output FILE", param_hint="--format")
    if format is Format.table:
        text = frame.to_string(index=False) if len(frame) else "no timings match"
    elif format is Format.csv:
        text = frame.to_csv(index=False)
    elif format is Format.json:
        text = frame.to_json(orient="records", date_format="iso", indent=1)
    else:
        frame.to_parquet(output, index=False)
        err.print(f"wrote {len(frame)} rows to {output}")
        return
    if output:
        output.write_text(text)
        err.print(f"wrote {len(frame)} rows to {output}")
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")


@app.command()
def dashboard(address: Annotated[str, typer.Option(
                  help="Address to bind (0.0.0.0 exposes it)")] = "127.0.0.1",
              port: Annotated[int, typer.Option(help="Port to serve on")] = 8501,
              db: DbOption = None) -> None:
    """Serve the dashboard (Streamlit, read-only) on http://ADDRESS:PORT."""
    from farm import serve

    page = Path(__file__).resolve().parents[1] / "dashboard" / "app.py"
    if not page.is_file():
        err.print(f"[bold red]error:[/] no dashboard at {page} (run from a source checkout)")
        raise typer.Exit(1)
    env = {**os.environ, **({"FARM_DB_URL": db} if db else {})}
    out.print(f"dashboard of {describe(db or default_url())} on http://{address}:{port}")
    # Streamlit runs as our child: signals to this process stop it, and it dies with us
    status = serve.run_owned(
        [sys.executable, "-m", "streamlit", "run", str(page), "--server.address", address,
         "--server.port", str(port), "--server.headless", "true",
         "--browser.gatherUsageStats", "false"], env=env)
    serve.exit_like(status)


def _cluster_commands() -> None:
    from farm.cluster import cli as cluster_cli

    app.command("run")(cluster_cli.run)
    app.command("workers")(cluster_cli.workers)
    app.command("record")(cluster_cli.record)
    app.command("merge-recordings")(cluster_cli.merge_recordings)
    app.command("import-recording")(cluster_cli.import_recording)
    app.command("demo")(cluster_cli.demo)


_cluster_commands()

from farm.select.cli import register as _select_commands  # noqa: E402
_select_commands(app)

if __name__ == "__main__":
    app()
