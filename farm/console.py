"""What the `farm` command's modules share: the consoles, the --db option, and expected
failures turned into one line on stderr and an exit status."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Annotated, Optional

import typer
from rich.console import Console

from farm.choices import UnknownChoice
from farm.specs import SpecError
from farm.store import DatabaseError, NotFound

_WIDTH = None if sys.stdout.isatty() else 160  # pipes and logs get whole rows
out = Console(width=_WIDTH)
err = Console(stderr=True, width=_WIDTH)

DbOption = Annotated[Optional[str], typer.Option("--db", envvar="FARM_DB_URL",
                                                 help="Database URL (default: FARM_DB_URL, "
                                                      "else a SQLite file in the user data dir)")]


@contextmanager
def exits_on(failures: Sequence[tuple[tuple[type[Exception], ...], int]]) -> Iterator[None]:
    """Each failure of the listed types as one red line and the exit status listed with the
    first of them it is; any other exception goes on."""
    try:
        yield
    except Exception as exc:
        for types, status in failures:
            if isinstance(exc, types):
                err.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
                raise typer.Exit(status) from None
        raise


def farm_errors() -> AbstractContextManager[None]:
    """The farm's expected failures: a bad spec or choice (status 2), an unreachable database
    or a missing row (status 1)."""
    return exits_on((((SpecError, UnknownChoice), 2), ((DatabaseError, NotFound), 1)))
