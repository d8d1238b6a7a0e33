"""``kafkawire-sniff export``: the tables of captures (``analyzer.tables``) as Parquet, on
one machine, no Spark needed.

Only wiring: the tables are defined in ``analyzer.tables``, written by
``analyzer.commands.options.write_tables`` (which ``sql`` runs too).
"""
from __future__ import annotations

import sys
from typing import Any

import click

from analyzer.commands.options import (
    capture_options,
    check_files,
    make_folders,
    prepare_out,
    write_tables,
)


@click.command("export")
@click.argument("captures", nargs=-1, required=True, type=click.Path())
@click.option("--out", "out", required=True, type=click.Path(file_okay=False),
              help="Folder to write the tables into: exchanges/, partitions/, batches/, lag/, connections/ (Parquet).")
@click.option("--overwrite", is_flag=True, help="Replace the tables of an --out folder that has them.")
@click.option("--trees", is_flag=True, help="Add each exchange's field trees as JSON text (request, response).")
@capture_options
def export_command(captures: tuple[str, ...], out: str, overwrite: bool, trees: bool, **kw: Any) -> None:
    """Write the tables of captures as Parquet: exchanges, partitions, batches, lag and
    connections (see the README's "Data model"), on this machine.

    The same tables as the spark job's, for DuckDB, pandas, polars, Spark or `sql`: one row
    per exchange, per topic-partition of a Produce or Fetch, per record batch of a Produce,
    per partition of a fetch session at each Fetch answer, per TCP connection.
    """
    check_files(captures)
    prepare_out(out, overwrite)
    make_folders(out, "--out ")
    counts = write_tables(captures, out, kw, trees)
    sys.stderr.write(f"wrote {out}: {', '.join(f'{n} {c} rows' for n, c in counts.items())}\n")
