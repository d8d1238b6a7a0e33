"""Render ``StatsAccumulator.result()``: tables (rich on a terminal, plain text otherwise),
log-scale latency histograms drawn with block characters, JSON, CSV and a picture
(PNG via matplotlib, or a self-contained HTML page embedding that PNG).
"""
from __future__ import annotations

import base64
import csv
import html
import io
import json
import math
from collections.abc import Sequence
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:       # rich is imported when a table is drawn (json and csv output go without it)
    from rich.console import Console
    from rich.table import Table

from analyzer.sinks.stats import fmt_ms

LAT_KEYS = ("min", "p50", "p90", "p99", "p999", "max", "mean")
LAT_TITLES = ("min", "p50", "p90", "p99", "p99.9", "max", "mean")
_EIGHTHS = " ▏▎▍▌▋▊▉"
_SPARK = "▁▂▃▄▅▆▇█"


# -- small formatters -----------------------------------------------------------


def fmt_num(v: float | None) -> str:
    if v is None:
        return "-"
    if v >= 100:
        return f"{v:.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}" if v >= 1 else f"{v:.3f}"


def fmt_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    x = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if x < 1024 or unit == "GiB":
            return f"{x:.0f} {unit}" if unit == "B" else f"{x:.1f} {unit}"
        x /= 1024
    return f"{n} B"  # pragma: no cover


def fmt_counts(d: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(d.items(), key=lambda kv: (-kv[1], kv[0]))) or "-"


def fmt_key(v: Any) -> str:
    return "-" if v is None else str(v)


def bar(value: int, peak: int, width: int) -> str:
    """A horizontal bar of ``value/peak * width`` cells in eighths of a block."""
    if peak <= 0 or value <= 0:
        return ""
    eighths = max(1, round(value / peak * width * 8))
    full, rest = divmod(eighths, 8)
    return "█" * full + (_EIGHTHS[rest] if rest else "")


def sparkline(values: Sequence[float]) -> str:
    if not values:
        return ""
    peak = max(values)
    if peak <= 0:
        return _SPARK[0] * len(values)
    return "".join(_SPARK[min(7, int(v / peak * 7.999))] if v > 0 else " " for v in values)


# -- tables as plain data, drawn two ways -------------------------------------------


class TextTable:
    def __init__(self, title: str, headers: Sequence[str], right: Sequence[bool]) -> None:
        self.title = title
        self.headers = list(headers)
        self.right = list(right)
        self.rows: list[list[str]] = []
        self.notes: list[str] = []      # lines printed under the table

    def add(self, row: Sequence[str]) -> None:
        self.rows.append(list(row))

    def rich(self) -> Table:
        from rich.table import Table

        t = Table(title=self.title, title_justify="left", header_style="bold",
                  caption="\n".join(self.notes) or None, caption_justify="left")
        for h, r in zip(self.headers, self.right, strict=True):
            t.add_column(h, justify="right" if r else "left", overflow="fold")
        for row in self.rows:
            t.add_row(*row)
        return t

    def plain(self) -> str:
        widths = [len(h) for h in self.headers]
        for row in self.rows:
            for i, c in enumerate(row):
                widths[i] = max(widths[i], len(c))

        def line(cells: Sequence[str]) -> str:
            out = []
            for c, w, r in zip(cells, widths, self.right, strict=True):
                out.append(c.rjust(w) if r else c.ljust(w))
            return "  ".join(out).rstrip()

        lines = [self.title, line(self.headers), line(["-" * w for w in widths])]
        lines.extend(line(r) for r in self.rows)
        lines.extend(self.notes)
        return "\n".join(lines)


def _key_headers(by: Sequence[str]) -> list[str]:
    return list(by)


def tables(result: dict[str, Any]) -> list[TextTable]:
    """The report as tables: latency per group, waits/throttling, slowest, throughput."""
    by = result["by"]
    out: list[TextTable] = []
    nk = len(by)
    t = TextTable("Latency (ms, request complete -> response complete)",
                  _key_headers(by) + ["count", "errors", *LAT_TITLES, "bytes in", "bytes out"],
                  [False] * nk + [True, False] + [True] * 9)
    for g in result["groups"]:
        lat = g["latency_ms"]
        t.add([fmt_key(g[k]) for k in by] + [str(g["count"]), fmt_counts(g["errors"])]
              + [fmt_num(lat[k]) for k in LAT_KEYS] + [fmt_bytes(g["bytes_in"]), fmt_bytes(g["bytes_out"])])
    out.append(t)

    t2 = TextTable("Time to first byte, intentional waits and throttling (ms)",
                   _key_headers(by) + ["ttfb p50", "ttfb p99", "waits", "service n", "service p50",
                                       "service p99", "throttled", "throttle total", "throttle max",
                                       "unanswered", "orphans", "no response"],
                   [False] * nk + [True, True, False] + [True] * 9)
    for g in result["groups"]:
        tt, sv = g["ttfb_ms"], g["latency_ms_excl_waits"]
        t2.add([fmt_key(g[k]) for k in by] + [
            fmt_num(tt["p50"]), fmt_num(tt["p99"]), fmt_counts(g["waits"]), str(g["service"]),
            fmt_num(sv["p50"]), fmt_num(sv["p99"]), str(g["throttled"]),
            str(g["throttle_time_ms"]["total"]), str(g["throttle_time_ms"]["max"]),
            str(g["unanswered"]), str(g["orphans"]), str(g["no_response"])])
    out.append(t2)

    if result.get("top"):
        out.append(top_table(result["top"]))

    thr = result["throughput"]
    if thr["topic_partitions"]:
        t4 = TextTable(f"Throughput per topic-partition over {fmt_span(thr['duration_s'])}",
                       ["topic", "partition", "produced recs", "produced", "recs/s", "fetched recs",
                        "fetched", "recs/s"],
                       [False, True, True, True, True, True, True, True])
        for tp in thr["topic_partitions"]:
            t4.add([fmt_key(tp["topic"]), fmt_key(tp["partition"]), str(tp["produced_records"]),
                    fmt_bytes(tp["produced_bytes"]), fmt_num(tp["produced_records_per_s"]),
                    str(tp["fetched_records"]), fmt_bytes(tp["fetched_bytes"]),
                    fmt_num(tp["fetched_records_per_s"])])
        out.append(t4)
    lag = lag_table(result)
    if lag is not None:
        out.append(lag)
    prod = producer_table(result)
    if prod is not None:
        out.append(prod)
    grp = group_table(result)
    if grp is not None:
        out.append(grp)
    return out


def _short(member: Any, width: int = 24) -> str:
    m = fmt_key(member)
    return m if len(m) <= width else m[:width - 3] + "..."


def group_table(result: dict[str, Any]) -> TextTable | None:
    """Consumer groups: one row per generation (classic protocol), what started its rebalance
    and how long it took; KIP-848 members with their epochs."""
    groups = result.get("consumer_groups") or []
    if not groups:
        return None
    t0 = result["throughput"]["first_time"] or 0.0
    t = TextTable("Consumer groups (a rebalance: first JoinGroup of a generation -> last SyncGroup answer)",
                  ["group", "generation", "protocol", "leader", "members", "rebalance start", "rebalance ms",
                   "started by"],
                  [False, True, False, False, True, True, True, False])
    for g in groups:
        for gen in g["generations"]:
            start = gen["rebalance_start"]
            t.add([g["group_id"], str(gen["generation"]), fmt_key(gen["protocol"]), _short(gen["leader"]),
                   str(len(gen["members"])), f"+{start - t0:.3f}s" if start is not None else "-",
                   fmt_num(gen["rebalance_ms"]), "; ".join(gen["triggers"]) or "-"])
        if g["rejoins_same_generation"]:
            t.add([g["group_id"], "-", "-", "-", "-", "-", "-",
                   f"{g['rejoins_same_generation']} rejoin(s) without the generation moving"])
        for m in g["members_kip848"]:
            t.add([g["group_id"], f"epoch {m['first_epoch']}-{m['last_epoch']}", "consumer (KIP-848)",
                   _short(m["member_id"]), "-", "-", "-", f"{m['assignments']} assignment(s)"])
        if not g["generations"] and not g["members_kip848"]:
            t.add([g["group_id"], "-", "-", "-", "-", "-", "-", f"{g['exchanges']} exchange(s), no generation seen"])
    return t


def producer_table(result: dict[str, Any]) -> TextTable | None:
    """Producers per client id and producer id: batching, compression, linger, acks, retries."""
    rows = result.get("producers") or []
    if not rows:
        return None
    t = TextTable("Producers (record batches v2; bytes per batch after -> before compression)",
                  ["client id", "producer id", "transactional id", "acks", "batches", "recs/batch", "bytes/batch",
                   "compression", "linger ms mean", "linger ms max", "retries"],
                  [False, True, False, False, True, True, True, False, True, True, True])
    for r in rows:
        before = r["bytes_before_per_batch"]
        size = fmt_bytes(round(r["bytes_per_batch"])) + (f" -> {fmt_bytes(round(before))}" if before is not None
                                                         and before != r["bytes_per_batch"] else "")
        comp = ", ".join(f"{c} {v['ratio']:.2f}x" if v["ratio"] is not None else c
                         for c, v in r["compression"].items())
        lin = r["linger_ms"]
        t.add([fmt_key(r["client_id"]), str(r["producer_id"]), fmt_key(r["transactional_id"]),
               fmt_counts(r["acks"]), str(r["batches"]), fmt_num(r["records_per_batch"]), size, comp,
               fmt_num(lin["mean"]), fmt_key(lin["max"]), fmt_key(r["retries"])])
    return t


def lag_table(result: dict[str, Any]) -> TextTable | None:
    """Consumer lag per group (or client id) and topic-partition, in records; the time of
    the max is counted from the first request of the capture."""
    rows = result.get("consumer_lag") or []
    if not rows:
        return None
    t0 = result["throughput"]["first_time"] or 0.0
    t = TextTable("Consumer lag (records: high watermark - fetch offset; committed: last stable offset)",
                  ["group / client id", "topic", "partition", "last", "max", "mean", "max at", "samples",
                   "committed last", "committed max"],
                  [False, False, True, True, True, True, True, True, True, True])
    for r in rows:
        who = f"{r['group']} / {r['client_id']}" if r["group"] else fmt_key(r["client_id"])
        t.add([who, fmt_key(r["topic"]), fmt_key(r["partition"]), str(r["last"]), str(r["max"]),
               fmt_num(r["mean"]), f"+{r['max_time'] - t0:.3f}s", str(r["samples"]),
               fmt_key(r["stable_last"]), fmt_key(r["stable_max"])])
    return t


def top_table(top: Sequence[dict[str, Any]]) -> TextTable:
    """The slowest exchanges (``StatsAccumulator.top``), slowest first; with their capture
    when several were merged (connection and frame numbers are per capture)."""
    many = any("capture" in r for r in top)
    t = TextTable(f"Slowest {len(top)} exchanges",
                  ["#", "latency", "ttfb", "api", "v", "corr id"] + ["capture"] * many +
                  ["conn", "client", "broker", "req frame", "resp frame", "wait", "errors"],
                  [True, True, True, False, True, True] + [False] * many +
                  [True, False, False, True, True, False, False])
    for i, r in enumerate(top, 1):
        t.add([str(i), fmt_num(r["latency_ms"]), fmt_num(r["ttfb_ms"]), r["api"], fmt_key(r["version"]),
               fmt_key(r["correlation_id"])] + [fmt_key(r.get("capture"))] * many +
              [fmt_key(r["conn"]), fmt_key(r["client"]), fmt_key(r["broker"]), fmt_key(r["request_frame"]),
               fmt_key(r["response_frame"]), r["wait"] or "-", ", ".join(r["error_codes"]) or "-"])
        if r.get("show"):
            t.notes.append(f"#{i}: {r['show']}")
    return t


def add_show(top: Sequence[dict[str, Any]], capture_of: dict[str | None, str]) -> None:
    """Give each slowest exchange the ``read`` command that shows it (``show``): its capture
    is ``capture_of[record's capture]`` (the key None: the record of a lone capture)."""
    from analyzer.sinks.output import read_command

    for r in top:
        cap = capture_of.get(r.get("capture"))
        frame = r.get("request_frame") or r.get("response_frame")
        if cap is not None and frame:
            r["show"] = read_command(cap, [frame])


def rate_lines(result: dict[str, Any], width: int = 60) -> list[str]:
    """Request rate over time as a sparkline of per-second buckets (folded to ``width``).

    Only the seconds seen (``per_second`` rows) are visited, each added straight into its
    bucket: memory and time follow the rows, never the clock span between them (a capture
    whose clock jumps by decades spans some 1e9 seconds)."""
    thr = result["throughput"]
    ps = thr["per_second"]
    if not ps:
        return []
    t0 = min(row["t"] for row in ps)
    span = max(row["t"] for row in ps) - t0 + 1        # the seconds from the first to the last request
    per = max(1, -(-span // width))                     # (ceilings in integers: a span may pass 2**53)
    sums = [0] * -(-span // per)                        # at most ``width`` buckets
    seconds: dict[int, int] = {}                        # second -> requests, the seconds seen
    for row in ps:
        sums[(row["t"] - t0) // per] += row["requests"]
        seconds[row["t"]] = seconds.get(row["t"], 0) + row["requests"]
    folded = [s / per for s in sums]
    # the average and the peak count the same one-second buckets (clock seconds from the
    # first to the last request), so the average never exceeds the peak; a capture shorter
    # than a second is not extrapolated to a rate it never had
    total = sum(sums)
    head = f"Requests: {total} over {fmt_span(thr['duration_s'])}"
    if span == 1:
        head += ", all within one second"
    else:
        # (a second not seen counted no request: the busiest second is one seen)
        head += (f"; per second, over the {span} seconds they span: {total / span:.1f} on average, "
                 f"{max(seconds.values())} at the busiest")
    unit = "1 s" if per == 1 else f"{per} s"
    return [head, f"per {unit}: {sparkline(folded)}"]


def connection_lines(c: dict[str, Any] | None) -> list[str]:
    """Why the connections were taken as Kafka (by port, or auto-detected with the
    evidence), and how many were not (``Summary.connections_json``)."""
    if c is None:
        return []
    from analyzer.sinks.output import detection_lines

    lines = detection_lines(c, limit=10)
    n = c["unidentified"]
    if n:
        lines.append(f"unidentified TCP, not kafka: {n} connection{'s' if n != 1 else ''} "
                     f"({fmt_bytes(c['unidentified_bytes'])} not analysed)")
    n = c["tls_not_decrypted"]
    if n:
        lines.append(f"TLS not decrypted: {n} connection{'s' if n != 1 else ''} "
                     f"({fmt_bytes(c['tls_not_decrypted_bytes'])} not analysed; give --tls-keylog FILE "
                     "to decode them)")
    return lines


def fmt_span(seconds: float) -> str:
    """A duration as a person reads it: ``0.037 s`` is ``37.0 ms``, ``83.5 µs`` below that."""
    if seconds >= 1:
        return f"{seconds:.1f} s"
    if seconds >= 0.001:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds * 1e6:.1f} µs"


def histogram_lines(hists: dict[str, list[tuple[float, int]]], width: int = 40) -> list[str]:
    """Per API, one line per log-scale (1-2-5) latency bucket: lower edge, bar, count."""
    lines: list[str] = []
    for api, buckets in hists.items():
        total = sum(n for _e, n in buckets)
        lines.append(f"{api} latency ({total} exchanges; buckets from their lower edge, log scale)")
        peak = max((n for _e, n in buckets), default=0)
        for edge, n in buckets:
            lines.append(f"  >= {fmt_ms(edge):>7} |{bar(n, peak, width):<{width}}| {n}")
        lines.append("")
    return lines


def accuracy_line(result: dict[str, Any]) -> str:
    acc = result["accuracy"]
    if acc["sketch_groups"]:
        return (f"Percentiles: nearest-rank; exact up to {acc['exact_limit']} values per group, "
                f"DDSketch beyond (relative error <= {acc['relative_accuracy']:.0%}) "
                f"for {acc['sketch_groups']} group(s).")
    return "Percentiles: nearest-rank, exact."


def render_text(result: dict[str, Any], console: Console, hists: dict[str, list[tuple[float, int]]] | None = None,
                plain: bool | None = None) -> None:
    """Print the report; rich tables on a terminal, aligned plain text otherwise."""
    if plain is None:
        plain = not console.is_terminal
    for t in tables(result):
        if plain:
            console.print(t.plain(), markup=False, highlight=False, soft_wrap=True)
            console.print()
        else:
            console.print(t.rich())
    for line in rate_lines(result) + connection_lines(result.get("connections")):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    if hists:
        console.print()
        for line in histogram_lines(hists):
            console.print(line, markup=False, highlight=False, soft_wrap=True)
    console.print(accuracy_line(result), markup=False, highlight=False, soft_wrap=True)


# -- machine formats ---------------------------------------------------------------


def write_json(result: dict[str, Any], fp: IO[str]) -> None:
    json.dump(result, fp, indent=2, sort_keys=False)
    fp.write("\n")


_CSV_JOINED = ("errors", "waits")


CSV_SECTIONS = ("groups", "consumer_lag", "producers", "consumer_groups")


def csv_rows(result: dict[str, Any], section: str = "groups") -> tuple[list[str], list[dict[str, Any]]]:
    """One flat row per group: nested figures become ``latency_ms_p99`` etc.,
    name->count maps become ``NAME=n;NAME=n``. ``section`` "consumer_lag": the
    ``consumer_lag`` objects, one row each, as they are; "producers": one row per producer,
    ``compression`` as ``codec_ratio`` etc. columns over every codec seen, ``acks`` joined."""
    rows: list[dict[str, Any]]
    header: list[str]
    row: dict[str, Any]
    if section == "consumer_lag":
        lag = result.get("consumer_lag") or []
        header = list(lag[0]) if lag else ["client_id", "group", "topic", "partition", "last", "max"]
        return header, [dict(r) for r in lag]
    if section == "consumer_groups":
        rows = [{"group_id": g["group_id"], **{k: (";".join(map(str, v)) if isinstance(v, list) else v)
                                               for k, v in gen.items()}}
                for g in result.get("consumer_groups") or [] for gen in g["generations"]]
        header = list(rows[0]) if rows else ["group_id", "generation"]
        return header, rows
    if section == "producers":
        prods = result.get("producers") or []
        codecs = sorted({c for r in prods for c in r["compression"]})
        rows = []
        for r in prods:
            row = {k: v for k, v in r.items() if k not in ("compression", "acks", "linger_ms", "producer_epochs")}
            row["producer_epochs"] = ";".join(map(str, r["producer_epochs"]))
            row["acks"] = ";".join(f"{n}={c}" for n, c in r["acks"].items())
            row["linger_ms_mean"], row["linger_ms_max"] = r["linger_ms"]["mean"], r["linger_ms"]["max"]
            for c in codecs:
                v = r["compression"].get(c) or {}
                for f in ("batches", "bytes", "bytes_before", "ratio"):
                    row[f"{c}_{f}"] = v.get(f)
            rows.append(row)
        header = list(rows[0]) if rows else ["client_id", "producer_id", "batches"]
        return header, rows
    rows = []
    header = []
    for g in result["groups"]:
        row = {}
        for k, v in g.items():
            if k in _CSV_JOINED:
                row[k] = ";".join(f"{n}={c}" for n, c in v.items())
            elif isinstance(v, dict):
                for sk, sv in v.items():
                    row[f"{k}_{sk}"] = sv
            else:
                row[k] = v
        if not header:
            header = list(row)
        rows.append(row)
    if not header:
        header = list(result["by"]) + ["count"]
    return header, rows


def write_csv(result: dict[str, Any], fp: IO[str], section: str = "groups") -> None:
    header, rows = csv_rows(result, section)
    w = csv.DictWriter(fp, fieldnames=header, lineterminator="\n")
    w.writeheader()
    for row in rows:
        w.writerow({k: "" if row.get(k) is None else row.get(k) for k in header})


# -- pictures ------------------------------------------------------------------------

MAX_PLOT_APIS = 8


def plot_highlights(result: dict[str, Any], series: dict[str, list[tuple[int, int, float, float]]]
                    ) -> tuple[str | None, dict[str, int]]:
    """The API with the slowest exchange, and the APIs with error responses (exchanges with
    errors per API; known when the grouping includes ``api``)."""
    worst = {api: max(x for _s, _n, _m, x in rows) for api, rows in series.items() if rows}
    slowest = max(worst, key=lambda a: (worst[a], a)) if worst else None
    erring: dict[str, int] = {}
    if "api" in result["by"]:
        for g in result["groups"]:
            if g.get("error_exchanges"):
                erring[g["api"]] = erring.get(g["api"], 0) + g["error_exchanges"]
    return slowest, erring


def plot_apis(counts: dict[str, int], slowest: str | None, erring: dict[str, int]) -> list[str]:
    """The APIs drawn: the slowest and those with errors always, then the busiest up to
    MAX_PLOT_APIS in all; busiest first."""
    must = {a for a in [slowest, *erring] if a in counts}
    rest = sorted((a for a in counts if a not in must), key=lambda a: (-counts[a], a))
    chosen = must | set(rest[:max(0, MAX_PLOT_APIS - len(must))])
    return sorted(chosen, key=lambda a: (-counts[a], a))


MAX_PLOT_LAGS = 10


def plot_png(result: dict[str, Any], hists: dict[str, list[tuple[float, int]]],
             series: dict[str, list[tuple[int, int, float, float]]],
             points: dict[str, list[tuple[float, float]]] | None = None, title: str = "",
             lag: dict[str, list[tuple[int, int]]] | None = None) -> bytes:
    """A PNG: latency over time per API (log y) above one log-scale histogram per API; with
    ``lag`` (``ConsumerLag.series``), consumer lag over time below them (the partitions with
    the highest lag, at most ``MAX_PLOT_LAGS``)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

    counts = {api: sum(n for _e, n in b) for api, b in hists.items()}
    slowest, erring = plot_highlights(result, series)
    apis = plot_apis(counts, slowest, erring)
    ncols = 4 if len(apis) > 4 else max(1, len(apis))
    nrows_h = max(1, math.ceil(len(apis) / ncols))
    lags = sorted((lag or {}).items(), key=lambda kv: (-max((v for _b, v in kv[1]), default=0), kv[0]))
    lags = [kv for kv in lags if kv[1]][:MAX_PLOT_LAGS]
    extra = 1 if lags else 0
    fig = plt.figure(figsize=(4 * ncols if ncols > 2 else 10, 4.2 + 2.6 * nrows_h + 3.2 * extra), dpi=100,
                     layout="constrained")
    gs = fig.add_gridspec(1 + nrows_h + extra, ncols, height_ratios=[1.6] + [1] * nrows_h + [1.3] * extra)
    ax = fig.add_subplot(gs[0, :])
    t0 = result["throughput"]["first_time"] or 0.0
    cmap = plt.get_cmap("tab10")
    colour = {api: cmap(i % 10) for i, api in enumerate(apis)}
    for api in apis:
        if points and points.get(api):
            xs = [t - t0 for t, _ in points[api]]
            ys = [max(v, 1e-3) for _, v in points[api]]
            ax.scatter(xs, ys, s=6, alpha=0.6, color=colour[api], label=api, linewidths=0)
        elif series.get(api):
            xs = [s - t0 for s, _n, _m, _x in series[api]]
            ax.plot(xs, [max(m, 1e-3) for _s, _n, m, _x in series[api]], color=colour[api], label=f"{api} mean")
            ax.plot(xs, [max(x, 1e-3) for _s, _n, _m, x in series[api]], color=colour[api], ls=":", alpha=0.7)
    ax.set_yscale("log")
    # ticks as durations (100us, 2ms, 1.5s) at 1-2-5 steps, or decades over a wide range
    lo, hi = ax.get_ylim()
    decades = math.log10(hi / lo) if lo > 0 and hi > lo else 1.0
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0) if decades <= 4 else (1.0,)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: fmt_ms(float(f"{v:.3g}"))))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("seconds since first request")
    ax.set_ylabel("latency (log scale)")
    what = "each exchange" if points else "per-second mean (solid) and max (dotted)"
    ax.set_title((title + ": " if title else "") + f"latency over time, {what}")
    ax.grid(True, which="both", alpha=0.3)
    if apis:
        ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small", markerscale=2)
    for i, api in enumerate(apis):
        hx = fig.add_subplot(gs[1 + i // ncols, i % ncols])
        buckets = hists[api]
        labels = [fmt_ms(e) for e, _n in buckets]
        hx.bar(range(len(buckets)), [n for _e, n in buckets], color=colour[api], width=0.85)
        step = max(1, math.ceil(len(labels) / 6))
        hx.set_xticks(range(0, len(labels), step), labels[::step], fontsize="small", rotation=30)
        notes = [str(counts[api])]
        if api == slowest:
            notes.append("slowest")
        if erring.get(api):
            notes.append(f"{erring[api]} with errors")
        hx.set_title(f"{api} ({', '.join(notes)})", fontsize="medium",
                     color="firebrick" if api == slowest or erring.get(api) else "black")
        hx.set_xlabel("latency bucket (>=, log scale)", fontsize="small")
        hx.yaxis.set_major_locator(MaxNLocator(integer=True))      # exchanges are counted whole
        hx.tick_params(axis="y", labelsize="small")
    if lags:
        lx = fig.add_subplot(gs[1 + nrows_h, :])
        for name, pts in lags:
            lx.step([b - t0 for b, _v in pts], [v for _b, v in pts], where="post", label=name)
        lx.set_xlabel("seconds since first request")
        lx.set_ylabel("lag (records)")
        lx.set_title("consumer lag over time (max per second: high watermark - fetch offset)")
        lx.grid(True, alpha=0.3)
        lx.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def html_page(png: bytes, result: dict[str, Any], title: str) -> str:
    """A small self-contained page: the PNG as base64 and the latency table."""
    by = result["by"]
    head = "".join(f"<th>{html.escape(h)}</th>" for h in [*by, "count", "errors", *LAT_TITLES])
    rows = []
    for g in result["groups"]:
        cells = [fmt_key(g[k]) for k in by] + [str(g["count"]), fmt_counts(g["errors"])]
        cells += [fmt_num(g["latency_ms"][k]) for k in LAT_KEYS]
        rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    b64 = base64.b64encode(png).decode("ascii")
    t = html.escape(title)
    return (
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>" + t + "</title>\n"
        "<style>body{font-family:sans-serif;margin:1.5em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}img{max-width:100%}</style>"
        "</head><body>\n<h1>" + t + "</h1>\n"
        f"<img alt=\"latency over time and histograms\" src=\"data:image/png;base64,{b64}\">\n"
        "<h2>Latency (ms)</h2>\n<table><tr>" + head + "</tr>\n" + "\n".join(rows) + "\n</table>\n"
        "<p>" + html.escape(accuracy_line(result)) + "</p>\n</body></html>\n"
    )


def write_plot(path: str, result: dict[str, Any], hists: dict[str, list[tuple[float, int]]],
               series: dict[str, list[tuple[int, int, float, float]]],
               points: dict[str, list[tuple[float, float]]] | None = None, title: str = "",
               lag: dict[str, list[tuple[int, int]]] | None = None) -> None:
    """Write ``path``: .png or .html (.htm); raises ValueError for other suffixes."""
    low = path.lower()
    if not (low.endswith(".png") or low.endswith(".html") or low.endswith(".htm")):
        raise ValueError(f"--plot writes .png or .html files, not {path!r}")
    png = plot_png(result, hists, series, points, title, lag)
    if low.endswith(".png"):
        with open(path, "wb") as f:
            f.write(png)
    else:
        with open(path, "w", encoding="utf-8") as f:
            f.write(html_page(png, result, title or "kafkawire-sniff stats"))
