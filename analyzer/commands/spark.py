"""``kafkawire-sniff spark``: the read/stats/check analysis of many and huge captures on Spark.

Only wiring: the job lives in the package ``analyzer.spark``.
"""
from __future__ import annotations

import os
import sys
import time
from typing import Any

import click

from analyzer.commands.options import (
    Size,
    by_param,
    capture_options,
    filter_option,
    options_from_kwargs,
    prepare_out,
    rule_list,
)
from analyzer.errors import UserError
from analyzer.sinks.stats import GROUP_KEYS

# a smaller range makes a task of a handful of packets (and "--split-size 8", meant as
# 8MiB, millions of them): refused with a one-line error
MIN_SPLIT_SIZE = "64KiB"


def _conf(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for v in value:
        k, sep, val = v.partition("=")
        if not sep or not k.strip():
            raise click.BadParameter(f"expected KEY=VALUE, got {v!r}")
        out[k.strip()] = val
    return out


@click.command("spark")
@click.argument("captures", nargs=-1, required=True)
@click.option("--out", "out_dir", required=True, metavar="DIR",
              help="Output directory (local path or Hadoop URI) for the Parquet tables: exchanges, "
                   "partitions, batches, lag, connections, stats, findings, consumer_lag, committed_lag, producers, "
                   "consumer_groups. "
                   "A local one must be new or empty, or given with --overwrite.")
@click.option("--master", default="local[*]", show_default=True,
              help="Spark master: local[N], or spark://HOST:PORT for a standalone cluster.")
@click.option("--by", default="api,version", show_default=True, callback=by_param,
              help=f"Stats grouping, as for 'stats': a comma-separated combination of {', '.join(GROUP_KEYS)}.")
@click.option("--top", type=click.IntRange(min=0), default=0, show_default=True,
              help="As for 'stats': list the N slowest exchanges of all the captures (also in stats.json).")
@click.option("--with-trees", is_flag=True, help="Also store the request/response field trees (JSON strings).")
@click.option("--rule", "rules", multiple=True, callback=rule_list, metavar="RULE",
              help="Only this check rule (repeatable, or comma-separated).")
@click.option("--skip-rule", "skip_rules", multiple=True, callback=rule_list, metavar="RULE",
              help="Not this check rule (repeatable, or comma-separated).")
@click.option("--slow-ms", type=click.FloatRange(min=0), default=1000.0, show_default=True,
              help="As for 'check': report exchanges slower than this.")
@click.option("--storm-rebalances", type=click.IntRange(min=1), default=5, show_default=True,
              help="As for 'check': rebalance storm threshold (generations per minute).")
@click.option("--split-size", type=Size(minimum=MIN_SPLIT_SIZE), default="64MiB", show_default=True,
              help=f"Cut bigger pcap/pcapng files into ranges of this size (at least {MIN_SPLIT_SIZE}), read by "
                   "separate tasks.")
@click.option("--pack-size", type=Size(), default="64MiB", show_default=True,
              help="Pack smaller files into one read task up to this many bytes.")
@click.option("--partitions", type=click.IntRange(min=1), default=None,
              help="Tasks that reassemble and decode connections (default: from the input size and cores).")
@click.option("--conf", "spark_conf", multiple=True, callback=_conf, metavar="KEY=VALUE",
              help="Extra Spark configuration (repeatable), e.g. --conf spark.executor.memory=4g.")
@click.option("--overwrite", is_flag=True, help="Replace the tables of a local --out folder that has them.")
@click.option("--quiet", "-q", is_flag=True, help="No progress line and no summary.")
@filter_option
@capture_options
def spark_command(captures: tuple[str, ...], out_dir: str, master: str, by: tuple[str, ...], top: int, with_trees: bool,
                  rules: tuple[str, ...], skip_rules: tuple[str, ...], slow_ms: float, storm_rebalances: int,
                  split_size: int, pack_size: int, partitions: int | None, spark_conf: dict[str, str],
                  overwrite: bool, quiet: bool, display_filter: Any, **kw: Any) -> int:
    """Analyse many and huge captures on Spark; write Parquet tables.

    Reads pcap/pcapng files (paths, globs, file:// or hdfs:// URIs), splits big files
    across tasks, reassembles each TCP connection in one task and writes under DIR:
    the tables of 'export' (exchanges, partitions, batches, lag, connections), stats (the
    figures of 'stats' for the same --by, its consumer lag, producers and consumer groups)
    and findings (what 'check' finds), plus stats.json and summary.json for a local DIR.
    Runs in-process (local[*]) unless --master names a cluster.
    """
    t0 = time.monotonic()
    from analyzer.sinks.check import RULES
    from analyzer.spark.inputs import JobConfig, SparkJobError, resolve_inputs
    from analyzer.spark.job import run_spark
    from analyzer.spark.outputs import OUTPUTS
    from analyzer.spark.session import (
        StatusLine,
        check_master,
        make_session,
        session_log,
        spark_error_text,
        stop_session,
    )

    chosen = set(rules) if rules else set(RULES)
    chosen -= set(skip_rules)
    if display_filter is not None and "conn" in display_filter.fields:
        # each task numbers the connections it reassembles: the capture's numbers come after
        raise UserError("-Y: spark cannot filter on conn (connections are numbered after the job); "
                        "use client or broker", 2)
    options, ctx = options_from_kwargs(kw)
    cfg = JobConfig(options=options, ctx=ctx, by=by, with_trees=with_trees, rules=frozenset(chosen),
                    slow_ms=slow_ms, storm_rebalances=storm_rebalances, split_size=split_size,
                    pack_size=pack_size, partitions=partitions or 0, top=top,
                    display_filter=display_filter.text if display_filter is not None else None)

    try:    # a standalone master that does not answer: said before anything is made
        check_master(master)
    except SparkJobError as e:
        raise UserError(str(e)) from None
    from analyzer._core import CaptureError

    local = [c for c in captures if "://" not in c or c.startswith("file://")]
    try:   # fail fast, before Spark starts, on local paths that are missing or not captures
        resolve_inputs(local) if local else None
    except (SparkJobError, CaptureError) as e:
        raise UserError(str(e)) from None
    if "://" not in out_dir:
        prepare_out(out_dir, overwrite, OUTPUTS)

    spark = None
    ok = False
    try:
        try:
            spark = make_session(master, conf=spark_conf)
            with StatusLine(spark.sparkContext, enabled=not quiet) as status:
                result = run_spark(spark, captures, out_dir, cfg, status)
            ok = True
        except (SparkJobError, CaptureError) as e:
            raise UserError(str(e)) from None
        except KeyboardInterrupt:
            raise
        except Exception as e:  # noqa: BLE001 - Py4J/Spark errors become one line
            log = session_log(spark) if spark is not None else None
            raise UserError(f"spark job failed: {spark_error_text(e)}"
                            + (f" (Spark's log: {log})" if log else "")) from None
    finally:
        if spark is not None:
            try:
                stop_session(spark, keep_log=not ok)
            except Exception:  # noqa: BLE001, S110 - already failing or stopping
                pass
    if not quiet:
        _print_summary(result, out_dir, time.monotonic() - t0, OUTPUTS if "://" not in out_dir else OUTPUTS[:-2])
    if top:
        from analyzer.sinks.stats_render import top_table

        slowest = result.stats["top"]       # (each with the `read` command that shows it)
        if slowest:
            click.echo(top_table(slowest).plain())
    return 0


def _print_summary(result: Any, out_dir: str, elapsed: float, outputs: tuple[str, ...]) -> None:
    s = result.summary
    sev: dict[str, int] = {}
    for f in result.findings:
        sev[f.severity] = sev.get(f.severity, 0) + 1
    lines = [
        f"files: {s['files']} ({_mib(s['bytes'])}), read by {result.reads} range task(s)",
        f"packets: {s.get('packets', 0)}",
        f"connections: {s.get('connections', 0)}",
        f"exchanges: {s.get('exchanges', 0)}",
        "findings: " + (", ".join(f"{n} {k}" for k, n in sorted(sev.items())) or "none"),
        f"elapsed: {elapsed:.1f} s (the job {result.elapsed:.1f} s)",
        f"wrote: {', '.join(os.path.join(out_dir, t) for t in outputs)}",
    ]
    if s.get("topic_ids_inexact"):
        lines.append(f"warning: {s['topic_ids_inexact']} topic id(s) named differently on connections interleaved "
                     "in time: the names given to them may differ from 'stats'")
    if result.renamed or result.redone:
        lines.insert(4, f"topic ids named on other connections: {result.renamed} renamed after the fact, "
                        f"{result.redone} connection group(s) decoded again")
    for f in s.get("per_file", []):
        if f.get("capture_warning"):
            lines.append(f"warning: {f['capture']}: {f['capture_warning']}")
    click.echo("== spark summary", err=True)
    for line in lines:
        click.echo("  " + line, err=True)
    sys.stderr.flush()


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 else f"{n} bytes"
