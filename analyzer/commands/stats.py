"""``kafkawire-sniff stats``: latency, errors and throughput per group of exchanges.

Only wiring: the figures come from ``analyzer.sinks.stats``, the drawing from
``analyzer.sinks.stats_render``.
"""
from __future__ import annotations

import os
import sys
from typing import Any

import click

from analyzer.commands.options import by_param, capture_options, filter_option, iter_captures, jobs_option
from analyzer.errors import UserError, stdout_console, warn_damaged
from analyzer.pipeline import merge_connections
from analyzer.runs import Decode, lean_decode
from analyzer.sinks.insights import LagTimeline
from analyzer.sinks.stats import (
    COSTLY_VIEWS,
    GROUP_KEYS,
    PointSample,
    StatsAccumulator,
    keep_top_for,
)
from analyzer.sinks.stats_render import SECTIONS


def with_endpoints(by: tuple[str, ...]) -> tuple[str, ...]:
    """The group keys of ``--by``, with ``client`` and ``broker`` after ``conn`` when ``conn``
    is one of them and they are not."""
    if "conn" not in by:
        return by
    i = by.index("conn") + 1
    return by[:i] + tuple(k for k in ("client", "broker") if k not in by) + by[i:]


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
    nearest-rank, exact up to 1000 values per group, then from a DDSketch within 1 %.

    \b
    The groups' figures as a query over the tables, to run and change with `sql`:
    kafkawire-sniff sql capture.pcap "$(kafkawire-sniff stats --query capture.pcap)"
    """
    if show_query:
        from analyzer.figures import groups_query, top_query
        click.echo(top_query(top) if top else groups_query(with_endpoints(by)), nl=False)
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
    acc_by = with_endpoints(by)
    # the costly views (committed lag, in-flight depth) are computed when their section is asked
    # (and the committed lag for a plot, which draws it)
    views = tuple(v for v in COSTLY_VIEWS if v == section or (plot_path and v == "committed_lag"))
    total = StatsAccumulator(acc_by, keep_top=keep_top_for(top), views=views)
    connections: dict[str, Any] | None = None     # why connections were taken as Kafka, or not
    points = PointSample() if plot_path else None
    many = len(captures) > 1
    # every figure comes from lean trees (the core's figures walk, core/src/figures/): the
    # same numbers as full trees; grouping by topic or partition keeps each request's topics
    decode = lean_decode(kw["max_depth"], Decode.lite(topics="topic" in by or "partition" in by))
    from analyzer.shards import auto_jobs, run_stats_sharded
    from analyzer.sinks import stats_render as sr

    # the worker processes count every exchange: a filtered run reads each capture in one;
    # so does a plot, which draws each consumer-lag figure at the time it was taken
    # (LagTimeline, kept in this process)
    workers = 1 if display_filter is not None or plot_path else (jobs or auto_jobs(captures))
    timeline = LagTimeline() if plot_path else None
    if timeline is not None:
        total.lag = timeline
    for path, run in iter_captures(captures, kw, progress=True, decode=decode):
        source = os.path.basename(path) if many else None
        if workers > 1 and os.path.isfile(path):
            res = run_stats_sharded(path, run.pipeline.options, run.ctx, acc_by, total.keep_top, workers,
                                    source=source, views=views, progress=run.progress)
            if res.exact:
                total.merge(res.acc)
                if res.connections is not None:
                    connections = merge_connections(connections, _tagged(res.connections, source))
                warn_damaged(path, res.capture_warning)
                continue
            # a topic id learnt between two lookups on other connections: only one
            # process gives the figures one process gives
        acc = StatsAccumulator(acc_by, keep_top=total.keep_top, views=views)
        acc.source = source
        if plot_path:
            acc.lag = LagTimeline()
        keep = display_filter.matcher(run.ctx) if display_filter is not None else None
        for ex in run:
            if keep is not None and not keep(ex):
                continue
            acc.add(ex)
            if points is not None:
                points.add(ex)
        total.merge(acc)
        connections = merge_connections(connections, _tagged(run.summary.connections_json(), source))
        warn_damaged(path, run.summary.capture_warning)

    result = total.result(top=top)
    result["by"] = list(by)         # (the keys asked for; conn groups carry client and broker besides)
    result["connections"] = connections

    sr.add_show(result["top"], {(os.path.basename(c) if many else None): c for c in captures})

    if fmt == "json":
        sr.write_json(sr.section_json(result, section), sys.stdout)
    elif fmt == "csv":
        sr.write_csv(result, sys.stdout, section or "groups")
    else:
        console = stdout_console(highlight=False)
        sr.render_text(result, console, total.histograms() if histogram else None, section=section,
                       width=None if console.is_terminal else sr.PLAIN_WIDTH)
    if histogram and fmt != "table":
        # machine output stays parseable: the histogram goes to stderr
        for line in sr.histogram_lines(total.histograms()):
            click.echo(line, err=True)
    if plot_path is not None:
        title = os.path.basename(captures[0]) + (f" (+{len(captures) - 1})" if many else "")
        try:
            sr.write_plot(plot_path, result, total.histograms(), total.latency_series(),
                          points.by_api() if points is not None else None, title,
                          timeline.series() if timeline is not None else None)
        except OSError as e:
            raise UserError(f"cannot write {plot_path}: {e.strerror or e}") from None
        click.echo(f"wrote {plot_path}", err=True)
