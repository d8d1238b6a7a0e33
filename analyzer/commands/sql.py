"""``kafkawire-sniff sql``: a query over the tables of captures (or of an ``export`` or
``spark`` folder), run by DuckDB, printed as a table, CSV or JSON.

Captures are written as the tables first (``export``'s Parquet, into a temporary folder),
so that DuckDB reads them as it reads any Parquet: memory stays within its limit, and it
spills to that folder when a query needs more.
"""
from __future__ import annotations

import csv
import json
import os
import sys
import tempfile
from typing import Any

import click

from analyzer import engine
from analyzer.commands.options import capture_options, check_files, make_folders, write_tables
from analyzer.errors import UserError, stdout_console
from analyzer.tables import TABLES


def _is_tables(path: str) -> bool:
    """A folder ``export`` or ``spark`` wrote: one sub-folder of Parquet per table."""
    return os.path.isdir(path) and any(os.path.isdir(os.path.join(path, t.name)) for t in TABLES)


def _cell(v: Any, exact: bool = False) -> str:
    """A value as text: a float as its shortest exact text (an epoch time keeps its
    microseconds), in the table cut to six significant digits when that is long."""
    if v is None:
        return ""
    if isinstance(v, float):
        text = repr(v)
        return text if exact or len(text) <= 18 else f"{v:.6g}"
    if isinstance(v, (list, dict)):
        return json.dumps(v, default=str, separators=(",", ":"))
    return str(v)


def print_result(cols: list[str], rows: list[tuple[Any, ...]], fmt: str) -> None:
    if fmt == "json":
        json.dump([dict(zip(cols, r, strict=True)) for r in rows], sys.stdout, indent=1, default=str)
        sys.stdout.write("\n")
    elif fmt == "csv":
        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerow(cols)
        w.writerows([[_cell(v, exact=True) for v in r] for r in rows])
    else:
        from rich.table import Table as RichTable

        t = RichTable(*cols, box=None, header_style="bold", pad_edge=False)
        for r in rows:
            t.add_row(*[_cell(v) for v in r])
        stdout_console(highlight=False).print(t)


@click.command("sql")
@click.argument("sources_and_query", nargs=-1, required=True, metavar="SOURCES... QUERY")
@click.option("-f", "--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table",
              show_default=True, help="Output format.")
@capture_options
def sql_command(sources_and_query: tuple[str, ...], fmt: str, **kw: Any) -> None:
    """Run a SQL query over the tables of captures, or of folders `export` or `spark`
    wrote: exchanges, partitions, batches, lag, connections (see the README's "Data model").

    \b
    kafkawire-sniff sql capture.pcap "SELECT api_name, count(*) FROM exchanges GROUP BY 1"

    The query runs in DuckDB (its SQL dialect), within a 96 MB memory limit, spilling
    to disk beyond it.
    """
    if len(sources_and_query) < 2:
        raise click.UsageError("give the captures (or table folders), then the query")
    *sources, query = sources_and_query
    # (DuckDB is imported once the captures are written: the tables' writing and DuckDB do
    # not hold memory at the same time)
    folders = [s for s in sources if _is_tables(s)]
    captures = tuple(s for s in sources if s not in folders)
    check_files(captures)
    with tempfile.TemporaryDirectory(prefix="kafkawire-sniff-sql-") as tmp:
        if captures:
            own = os.path.join(tmp, "tables")
            make_folders(own)
            write_tables(captures, own, kw)
            folders.append(own)
            engine.give_back_memory()
        import duckdb

        try:
            db = engine.connect(folders, os.path.join(tmp, "spill"))
        except duckdb.Error as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise UserError(f"cannot read the tables: {first}") from None
        try:
            cur = db.execute(query)
            cols = [d[0] for d in cur.description] if cur.description else []
            rows = cur.fetchall() if cols else []
        except duckdb.Error as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise UserError(f"query failed: {first}", exit_code=2) from None
        finally:
            db.close()
    print_result(cols, rows, fmt)
