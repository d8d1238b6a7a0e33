"""``kafkawire-sniff export``: the tables of captures (``analyzer.tables``) as Parquet, on
one machine, no Spark needed; and what ``sql`` shares with it: checking the captures
named, and opening a folder of tables.

Only wiring: the tables are defined in ``analyzer.tables``.
"""
from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterable
from typing import Any

import click

from analyzer.commands.options import capture_options, lean_decode
from analyzer.errors import UserError, warn_damaged
from analyzer.tables import EXCHANGES, TABLES, Table, with_trees

PART = "part-00000.parquet"
TABLE_NAMES = tuple(t.name for t in TABLES)


def need_arrow(command: str) -> None:
    """pyarrow, or one line naming the extra that brings it."""
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise UserError(f"{command} needs pyarrow (pip install 'kafkawire-sniff[tables]')") from None


def check_captures(captures: tuple[str, ...]) -> None:
    """Every capture named is a readable file, before any is read (one line for the first
    that is not)."""
    for path in captures:
        if not os.path.exists(path):
            raise UserError(f"no such capture: {path}")
        if os.path.isdir(path):
            raise UserError(f"{path} is a folder, not a capture")
        if not os.access(path, os.R_OK):
            raise UserError(f"cannot read {path} (permission denied)")


def prepare_out(out: str, overwrite: bool, names: Iterable[str] = TABLE_NAMES) -> None:
    """``out`` made ready for what a command writes there (``names``): new, empty, or (with
    ``overwrite``) holding only such outputs, which go; anything else there is refused,
    never deleted."""
    names = set(names)
    if os.path.exists(out):
        if not os.path.isdir(out):
            raise UserError(f"--out {out} is a file, not a folder")
        there = set(os.listdir(out))
        if there and not overwrite:
            raise UserError(f"--out {out} is not empty (use --overwrite to replace its tables)")
        foreign = sorted(there - names)
        if foreign:
            raise UserError(f"--out {out} holds other files ({', '.join(foreign[:3])}): not replaced")
        for n in there:
            p = os.path.join(out, n)
            shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot write --out {out}: {e.strerror or e}") from None


def make_folders(out: str, what: str = "") -> None:
    """``out`` and a folder in it per table."""
    try:
        for t in TABLES:
            os.makedirs(os.path.join(out, t.name), exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot write {what}{out}: {e.strerror or e}") from None


def write_tables(captures: tuple[str, ...], out: str, kw: dict[str, Any], trees: bool = False) -> dict[str, int]:
    """The tables of ``captures`` (read with the shared options ``kw``) as Parquet in
    ``out``'s table folders, made already: each table's rows written."""
    from analyzer.cli import iter_captures
    from analyzer.tables import ParquetTable, rows_of

    tables: list[Table] = [with_trees(EXCHANGES) if trees else EXCHANGES, *TABLES[1:]]
    writers = {t.name: ParquetTable(t, os.path.join(out, t.name, PART)) for t in tables}
    decode = "full" if trees else lean_decode(kw["max_depth"], "lite")
    runs = iter_captures(captures, kw, progress=True, decode=decode)
    damaged: list[tuple[str, str | None]] = []

    def named() -> Any:
        for path, run in runs:
            yield path, run
            damaged.append((path, run.summary.capture_warning))

    try:
        for table, row in rows_of(named(), trees):
            writers[table].add(row)
    finally:
        for w in writers.values():
            w.close()
    for path, warning in damaged:
        warn_damaged(path, warning)
    return {n: w.count for n, w in writers.items()}


@click.command("export")
@click.argument("captures", nargs=-1, required=True, type=click.Path())
@click.option("--out", "out", required=True, type=click.Path(file_okay=False),
              help="Folder to write the tables into: exchanges/, partitions/, connections/ (Parquet).")
@click.option("--overwrite", is_flag=True, help="Replace the tables of an --out folder that has them.")
@click.option("--trees", is_flag=True, help="Add each exchange's field trees as JSON text (request, response).")
@capture_options
def export_command(captures: tuple[str, ...], out: str, overwrite: bool, trees: bool, **kw: Any) -> None:
    """Write the tables of captures as Parquet: exchanges, partitions and connections
    (see the README's "Data model"), on this machine.

    The same tables as the spark job's, for DuckDB, pandas, polars, Spark or `sql`:
    one row per exchange, per topic-partition of a Produce or Fetch, per TCP connection.
    """
    need_arrow("export")
    check_captures(captures)
    prepare_out(out, overwrite)
    make_folders(out, "--out ")
    counts = write_tables(captures, out, kw, trees)
    sys.stderr.write(f"wrote {out}: {', '.join(f'{n} {c} rows' for n, c in counts.items())}\n")
