"""``kafkawire-sniff stats``: latency, errors and throughput per group of exchanges.

Only wiring: the captures become the exchange tables (``analyzer.tables``, written as Parquet
in a temporary folder: by the core, or by the worker processes of ``analyzer.shards``), the
figures are queries over them (``analyzer.figures``, run by ``analyzer.engine``), the stories
come from ``analyzer.sinks.stats.Stories``, the drawing from ``analyzer.sinks.stats_render``.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
from typing import Any

import click

from analyzer import figures
from analyzer.commands.options import by_param, capture_options, filter_option, iter_captures, jobs_option
from analyzer.errors import UserError, stdout_console, warn_damaged
from analyzer.pipeline import merge_connections
from analyzer.runs import Decode, lean_decode
from analyzer.sinks.stats import COSTLY_VIEWS, GROUP_KEYS, Stories
from analyzer.sinks.stats_render import SECTIONS


def _tagged(connections: dict[str, Any], source: str | None) -> dict[str, Any]:
    """A capture's ``connections`` block, its auto-detected connections named by capture
    (``source``: one of several captures)."""
    if source is not None:
        connections["auto_detected"] = [{**a, "capture": source} for a in connections["auto_detected"]]
    return connections


@click.command("stats")
@click.argument("captures", nargs=-1, required=True, type=click.Path())
@click.option("--by", default="api,version", show_default=True, callback=by_param,
              help=f"Group by a comma-separated combination of: {', '.join(GROUP_KEYS)}.")
@click.option("--top", type=click.IntRange(min=0), default=0, show_default=True,
              help="Also list the N slowest exchanges (frame numbers and connection, for 'read').")
@click.option("-f", "--format", "fmt", type=click.Choice(["table", "json", "csv"]), default="table",
              show_default=True, help="Output format.")
@click.option("--section", type=click.Choice(SECTIONS),
              default=None,
              help="Show one view alone, in every format: the groups (with --top, the slowest exchanges), "
                   "consumer lag per client id and topic-partition, committed-offset lag per group and "
                   "topic-partition, requests in flight at once per client id and connection, producers per client id and producer id, "
                   "or consumer-group generations [default: the whole report; -f csv: groups].")
@click.option("--histogram", is_flag=True, help="Draw a log-scale latency histogram per API.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False),
              help="Write a picture: latency over time and histograms (.png, or a self-contained .html).")
@click.option("--query", "show_query", is_flag=True,
              help="Print the SQL behind the groups' figures (for --by; with --top N, behind the N slowest "
                   "exchanges) and exit: `sql` runs it over the captures' tables, to change what it counts.")
@jobs_option
@filter_option
@capture_options
def stats_command(captures: tuple[str, ...], by: tuple[str, ...], top: int, fmt: str, section: str | None,
                  histogram: bool, plot_path: str | None, show_query: bool, jobs: int, display_filter: Any,
                  **kw: Any) -> None:
    """Latency percentiles, errors, waits, throttling and throughput; consumer lag per
    client id and topic-partition, producers per client id and producer id, consumer-group
    generations and rebalances.

    Latency runs from the packet that completed the request to the packet that
    completed the response (ttfb: to the response's first byte). Percentiles are
    nearest-rank and exact: every figure is a query over the capture's exchange tables.

    \b
    The groups' figures as a query over the tables, to run and change with `sql`:
    kafkawire-sniff sql capture.pcap "$(kafkawire-sniff stats --query capture.pcap)"
    """
    if show_query:
        click.echo(figures.top_query(top) if top else figures.groups_query(figures.with_endpoints(by)), nl=False)
        return

    if plot_path is not None:
        low = plot_path.lower()
        if not low.endswith((".png", ".html", ".htm")):
            raise click.BadParameter("the file name must end in .png or .html", param_hint="--plot")
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise UserError("--plot needs matplotlib (pip install matplotlib)") from None

    # grouped by connection, the groups carry its client and broker too (one each per
    # connection: the same groups), so that a connection is shown with its endpoints
    acc_by = figures.with_endpoints(by)
    # the costly views (committed lag, in-flight depth) are computed when their section is asked
    # (and the committed lag for a plot, which draws it)
    views = tuple(v for v in COSTLY_VIEWS if v == section or (plot_path and v == "committed_lag"))
    stories = Stories(views)
    connections: dict[str, Any] | None = None     # why connections were taken as Kafka, or not
    many = len(captures) > 1
    labels = {c: os.path.basename(c) for c in captures} if many else None
    # the tables the figures read: the core builds the rows of the exchanges its lean walk
    # reads (with each request's topics, for topic_partitions) and hands on the exchanges that
    # tell the group stories
    decode = lean_decode(kw["max_depth"], Decode.LITE_TOPICS)
    from analyzer import engine
    from analyzer.shards import (
        FIGURES_TABLES,
        MIN_SHARDED_BYTES,
        TEMPORARY,
        auto_jobs,
        core_tables,
        run_stats_sharded,
    )
    from analyzer.sinks import stats_render as sr
    from analyzer.tables import open_writers, table_run

    # a capture file of some size is read in forked worker processes (``analyzer.shards``),
    # which write its tables: this process holds no more than their stories, and then the
    # engine. A filtered run reads each capture in one worker (the filter reads every
    # exchange); small captures and what is not a file (a pipe) are read here
    workers = 1 if display_filter is not None else (jobs or auto_jobs(captures))
    tabled = core_tables(decode, stories, display_filter)
    with tempfile.TemporaryDirectory(prefix="kafkawire-sniff-stats-") as tmp:
        whole = os.path.join(tmp, "tables")
        writers: dict[str, Any] = {}        # (opened for the first capture read here)
        parts: list[engine.Part] = []
        try:
            for path, run in iter_captures(captures, kw, progress=True, decode=decode, tables=tabled, hand=stories.keys,
                                           hand_failed=stories.failed_keys):
                source = os.path.basename(path) if many else None
                if os.path.isfile(path) and (workers > 1 or os.path.getsize(path) >= MIN_SHARDED_BYTES):
                    res = run_stats_sharded(path, run.pipeline.options, run.ctx, os.path.join(tmp, f"c{len(parts)}"),
                                            workers, source=source, views=views, progress=run.progress,
                                            display_filter=display_filter)
                    if res.exact:
                        stories.merge(res.stories)
                        parts += res.parts
                        if res.connections is not None:
                            connections = merge_connections(connections, _tagged(res.connections, source))
                        warn_damaged(path, res.capture_warning)
                        del res         # (merged: its stories' memory goes before the engine runs)
                        continue
                    # a topic id learnt between two lookups on other connections: only one
                    # process gives the figures one process gives
                    for part in res.parts:
                        shutil.rmtree(part.folder, ignore_errors=True)
                # (a capture's own stories: the in-flight view settles its connections as its own)
                own = Stories(views)
                own.source = source
                keep = display_filter.matcher(run.ctx) if display_filter is not None else None
                writers = writers or open_writers(whole, FIGURES_TABLES, compression=TEMPORARY)
                table_run(path, run, writers, stories=own.add, keep=keep)
                stories.merge(own)
                connections = merge_connections(connections, _tagged(run.summary.connections_json(), source))
                warn_damaged(path, run.summary.capture_warning)
        finally:
            for w in writers.values():
                w.close()
        import duckdb

        engine.give_back_memory()
        try:
            db = engine.connect([whole], os.path.join(tmp, "spill"), parts, ordered=False)
            try:
                query = engine.query_of(db)
                # the stories told (and their memory handed back) before the figures' queries run
                told = stories.result(figures.group_counts(query))
                del stories
                engine.give_back_memory()
                result = figures.report(query, acc_by, top, labels)
                hists = figures.histograms(query) if histogram or plot_path else None
                series = figures.latency_series(query) if plot_path else None
                points = figures.points(query) if plot_path else None
                lag_series = figures.lag_points(query) if plot_path else None
            finally:
                db.close()
        except duckdb.Error as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise UserError(f"the figures' queries failed: {first} (their temporary folder: {tmp})") from None
    result = {"by": list(by), "groups": result["groups"], "top": result["top"], "throughput": result["throughput"],
              "consumer_lag": result["consumer_lag"], "producers": result["producers"], **told,
              "accuracy": result["accuracy"], "connections": connections}
    # (the keys asked for; conn groups carry client and broker besides)

    sr.add_show(result["top"], {(os.path.basename(c) if many else None): c for c in captures})

    if fmt == "json":
        sr.write_json(sr.section_json(result, section), sys.stdout)
    elif fmt == "csv":
        sr.write_csv(result, sys.stdout, section or "groups")
    else:
        console = stdout_console(highlight=False)
        sr.render_text(result, console, hists if histogram else None, section=section,
                       width=None if console.is_terminal else sr.PLAIN_WIDTH)
    if histogram and fmt != "table":
        # machine output stays parseable: the histogram goes to stderr
        for line in sr.histogram_lines(hists or {}):
            click.echo(line, err=True)
    if plot_path is not None:
        title = os.path.basename(captures[0]) + (f" (+{len(captures) - 1})" if many else "")
        try:
            sr.write_plot(plot_path, result, hists or {}, series or {}, points, title,
                          lag_series)
        except OSError as e:
            raise UserError(f"cannot write {plot_path}: {e.strerror or e}") from None
        click.echo(f"wrote {plot_path}", err=True)
