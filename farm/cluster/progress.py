"""Live progress bars for `farm run`: one per job with pairs finished/total, failures,
measurements per second (this run's, cached pairs excluded) and the time left at that rate."""

from __future__ import annotations

import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class ProgressBars:
    """A Reporter drawing rich progress bars; use as a context manager."""

    def __init__(self, console: Console | None = None) -> None:
        self.progress = Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TextColumn("{task.fields[failed]} failed"),
                                 TextColumn("{task.fields[rate]}"), TextColumn("{task.fields[eta]}"),
                                 console=console)
        self.tasks: dict[int, tuple[int, int, float, int]] = {}  # job -> task, total, t0, base

    def __enter__(self) -> ProgressBars:
        self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.stop()

    def job_started(self, job_id: int, name: str, total: int, finished: int) -> None:
        task = self.progress.add_task(f"job {job_id} {name}", total=total, completed=finished,
                                      failed=0, rate="", eta="")
        self.tasks[job_id] = (task, total, time.monotonic(), finished)

    def job_progress(self, job_id: int, done: int, failed: int, cached: int) -> None:
        task, total, start, base = self.tasks[job_id]
        finished = done + failed + cached
        rate = (finished - base) / max(time.monotonic() - start, 1e-6)
        eta = f"ETA {_duration((total - finished) / rate)}" if rate > 0 else ""
        self.progress.update(task, completed=finished, failed=failed, rate=f"{rate:.1f} pairs/s",
                             eta=eta)

    def job_finished(self, job_id: int, status: str, message: str = "") -> None:
        if job_id in self.tasks:
            task, *_ = self.tasks[job_id]
            self.progress.update(task, eta=status)
        if message:
            self.progress.console.print(f"job {job_id}: {status}: {message}", highlight=False)

    def note(self, message: str) -> None:
        self.progress.console.print(message, highlight=False)
