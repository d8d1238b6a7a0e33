"""Render ``stats``' report (``analyzer.figures.report`` and the stories): tables (rich on a terminal, plain text otherwise),
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
from collections.abc import Callable, Sequence
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

# the width plain text (not a terminal: a pipe, a file) is laid out for, whatever the
# environment says (COLUMNS is set in the children of programs that load readline): the
# same text everywhere; rich tables take their console's width
PLAIN_WIDTH = 100
GAP = 2                 # spaces between columns (rich: its padding and the box's divider)


def _longest_word(text: str) -> int:
    return max((len(w) for w in text.split()), default=0)


def _wrap(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width``, broken at spaces (a longer word is cut)."""
    import textwrap

    if len(text) <= width:
        return [text]
    return textwrap.wrap(text, width, break_on_hyphens=False) or [""]


def _wrapped(line: str, width: int) -> list[str]:
    """A line of text in lines of at most ``width``, continued under its indent plus four."""
    import textwrap

    if len(line) <= width:
        return [line]
    indent = " " * (len(line) - len(line.lstrip(" ")) + 4)
    return textwrap.wrap(line, width, subsequent_indent=indent, break_on_hyphens=False) or [line]


class TextTable:
    """A table as text cells. It is drawn to a width (``layout``): headers and left-aligned
    (text) cells wrap at spaces where the columns would not fit otherwise, and when even
    then they do not, the ``optional`` columns are left out (the last first) and at last
    the columns are stacked in parts, each repeating the first ``keys`` columns (the ones
    that name a row). Right-aligned (number) cells never wrap."""

    def __init__(self, title: str, headers: Sequence[str], right: Sequence[bool], keys: int = 1,
                 optional: Sequence[str] = ()) -> None:
        self.title = title
        self.headers = list(headers)
        self.right = list(right)
        self.keys = keys
        self.optional = [self.headers.index(h) for h in optional]
        self.rows: list[list[str]] = []
        self.notes: list[str] = []      # lines printed under the table

    def add(self, row: Sequence[str]) -> None:
        self.rows.append(list(row))

    # -- layout ------------------------------------------------------------------------
    def _widths(self) -> tuple[list[int], list[int], list[int]]:
        """Per column: its natural width (nothing wrapped), the width with its header wrapped
        (cells whole), and its least width (text cells wrapped too: the longest word)."""
        natural, headed, least = [], [], []
        for i, h in enumerate(self.headers):
            cells = [r[i] for r in self.rows]
            longest = max((len(c) for c in cells), default=0)
            natural.append(max(len(h), longest))
            headed.append(max(_longest_word(h), longest, 1))
            words = longest if self.right[i] else max((_longest_word(c) for c in cells), default=0)
            least.append(max(_longest_word(h), words, 1))
        return natural, headed, least

    def layout(self, width: int) -> list[tuple[list[int], list[int]]]:
        """The parts the table is drawn in, each (column indexes, their widths): one part when
        the columns fit in ``width`` (wrapping headers first, then text cells, the roomiest
        column first), else the key columns and as many others as fit, part after part."""
        natural, headed, least = self._widths()

        def fit(cols: list[int]) -> list[int] | None:
            w = {c: natural[c] for c in cols}
            excess = sum(w.values()) + GAP * (len(cols) - 1) - width
            # headers first, each wrapped whole (the one that saves most first), then text
            # cells, a column at a time (the one with the most room first)
            for c in sorted(cols, key=lambda c: (headed[c] - natural[c], c)):
                if excess <= 0:
                    break
                excess -= w[c] - headed[c]
                w[c] = headed[c]
            while excess > 0:
                c = max(cols, key=lambda c: (w[c] - least[c], -c))
                if w[c] <= least[c]:
                    return None
                w[c] -= 1
                excess -= 1
            return [w[c] for c in cols]

        everything = list(range(len(self.headers)))
        one = fit(everything)
        if one is not None:
            return [(everything, one)]
        for k in range(1, len(self.optional) + 1):
            left_out = set(self.optional[-k:])
            everything = [c for c in range(len(self.headers)) if c not in left_out]
            one = fit(everything)
            if one is not None:
                return [(everything, one)]
        # stacked (every column has room): as few parts as will do, the columns shared out
        # among them as evenly as they go (the widest part the narrowest), in their order
        everything = list(range(len(self.headers)))
        keys, rest = everything[:self.keys], everything[self.keys:]
        parts = self._stack(keys, rest, fit, natural)
        return [(keys + p, fit(keys + p) or [least[c] for c in keys + p]) for p in parts]

    @staticmethod
    def _stack(keys: list[int], rest: list[int], fit: Callable[[list[int]], list[int] | None],
               natural: list[int]) -> list[list[int]]:
        import itertools

        for k in range(2, len(rest) + 1):
            best: tuple[int, list[list[int]]] | None = None
            for cuts in itertools.combinations(range(1, len(rest)), k - 1):
                bounds = (0, *cuts, len(rest))
                parts = [rest[a:b] for a, b in itertools.pairwise(bounds)]
                widest = max(sum(natural[c] + GAP for c in p) for p in parts)
                if (best is None or widest < best[0]) and all(fit(keys + p) is not None for p in parts):
                    best = (widest, parts)
            if best is not None:
                return best[1]
        return [[c] for c in rest]

    def _part_title(self, i: int) -> str:
        return self.title if i == 0 else f"{self.title} (continued)"

    # -- drawing -----------------------------------------------------------------------
    def rich(self, width: int = PLAIN_WIDTH) -> list[Table]:
        """The table as rich Tables laid out for ``width`` (one per part)."""
        from rich import box
        from rich.table import Table

        parts = self.layout(width)
        out = []
        for i, (cols, widths) in enumerate(parts):
            last = i == len(parts) - 1
            t = Table(title=self._part_title(i), title_justify="left", header_style="bold", box=box.SIMPLE_HEAD,
                      show_edge=False, pad_edge=False, padding=(0, GAP - 1, 0, 0),
                      caption="\n".join(self.notes) if last and self.notes else None, caption_justify="left")
            for c, w in zip(cols, widths, strict=True):
                t.add_column(self.headers[c], justify="right" if self.right[c] else "left", width=w,
                             overflow="fold")
            for row in self.rows:
                t.add_row(*[row[c] for c in cols])
            out.append(t)
        return out

    def plain(self, width: int | None = None) -> str:
        """Aligned plain text laid out for ``width`` (PLAIN_WIDTH by default)."""
        width = PLAIN_WIDTH if width is None else width
        parts = self.layout(width)
        text = "\n\n".join(self._plain_part(_wrapped(self._part_title(i), width), cols, widths)
                           for i, (cols, widths) in enumerate(parts))
        return text + "".join("\n" + note for note in self.notes)

    def _plain_part(self, title: list[str], cols: list[int], widths: list[int]) -> str:
        def lines_of(cells: list[list[str]], bottom: bool) -> list[str]:
            height = max(len(c) for c in cells)
            out = []
            for k in range(height):
                texts = []
                for cell, c, w in zip(cells, cols, widths, strict=True):
                    pad = height - len(cell) if bottom else 0
                    t = cell[k - pad] if 0 <= k - pad < len(cell) else ""
                    texts.append(t.rjust(w) if self.right[c] else t.ljust(w))
                out.append((" " * GAP).join(texts).rstrip())
            return out

        lines = list(title)
        lines += lines_of([_wrap(self.headers[c], w) for c, w in zip(cols, widths, strict=True)], bottom=True)
        lines.append((" " * GAP).join("-" * w for w in widths))
        for row in self.rows:
            lines += lines_of([_wrap(row[c], w) for c, w in zip(cols, widths, strict=True)], bottom=False)
        return "\n".join(lines)


def key_cells(g: dict[str, Any], by: Sequence[str]) -> list[str]:
    """A group's key values as cells; a connection with its endpoints when the keys do not
    show them (``4 127.0.0.1:59384 -> 127.0.0.1:52615``, ``FILE#4 ...`` from several captures)."""
    cells = []
    for k in by:
        v = fmt_key(g[k])
        if k == "conn" and g.get("client") is not None and not {"client", "broker"} <= set(by):
            v = f"{v} {g['client']} -> {fmt_key(g.get('broker'))}"
        cells.append(v)
    return cells


def _not_timed(g: dict[str, Any]) -> str:
    """The exchanges of a group that have no latency, by why (``-``: none)."""
    return fmt_counts({k: n for k, n in (("unanswered", g["unanswered"]), ("orphans", g["orphans"]),
                                         ("no response", g["no_response"]), ("malformed", g.get("malformed", 0)))
                       if n})


def group_tables(result: dict[str, Any]) -> list[TextTable]:
    """The figures per group, in three tables that each fit a terminal: latency; errors and
    waits; time to first byte, throttling, bytes and the exchanges without a latency (every
    figure is in ``-f json`` and ``-f csv``)."""
    by = list(result["by"])
    nk = len(by)
    groups = result["groups"]
    t = TextTable("Latency (ms, request complete -> response complete)", by + ["count", *LAT_TITLES],
                  [False] * nk + [True] * 8, keys=nk)
    for g in groups:
        lat = g["latency_ms"]
        t.add(key_cells(g, by) + [str(g["count"])] + [fmt_num(lat[k]) for k in LAT_KEYS])
    t2 = TextTable("Errors and intentional waits; service: the latency without the waits (ms)",
                   by + ["errors", "waits", "service p50", "service p99"], [False] * nk + [False, False, True, True],
                   keys=nk)
    for g in groups:
        sv = g["latency_ms_excl_waits"]
        t2.add(key_cells(g, by) + [fmt_counts(g["errors"]), fmt_counts(g["waits"]), fmt_num(sv["p50"]),
                                   fmt_num(sv["p99"])])
    t3 = TextTable("Time to first byte (ms), throttling, bytes, exchanges without a latency",
                   by + ["ttfb p50", "ttfb p99", "throttled", "throttle max ms", "bytes in", "bytes out", "not timed"],
                   [False] * nk + [True] * 6 + [False], keys=nk)
    for g in groups:
        tt = g["ttfb_ms"]
        t3.add(key_cells(g, by) + [
            fmt_num(tt["p50"]), fmt_num(tt["p99"]), str(g["throttled"]), str(g["throttle_time_ms"]["max"]),
            fmt_bytes(g["bytes_in"]), fmt_bytes(g["bytes_out"]), _not_timed(g)])
    return [t, t2, t3]


def throughput_table(result: dict[str, Any]) -> TextTable | None:
    thr = result["throughput"]
    if not thr["topic_partitions"]:
        return None
    t = TextTable(f"Throughput per topic-partition over {fmt_span(thr['duration_s'])}",
                  ["topic", "partition", "produced recs", "produced", "recs/s", "fetched recs", "fetched", "recs/s"],
                  [False, True, True, True, True, True, True, True], keys=2)
    for tp in thr["topic_partitions"]:
        t.add([fmt_key(tp["topic"]), fmt_key(tp["partition"]), str(tp["produced_records"]),
               fmt_bytes(tp["produced_bytes"]), fmt_num(tp["produced_records_per_s"]),
               str(tp["fetched_records"]), fmt_bytes(tp["fetched_bytes"]), fmt_num(tp["fetched_records_per_s"])])
    return t


# the views of ``--section`` (README, stats): which part of the report each one is
SECTIONS = ("groups", "consumer_lag", "committed_lag", "in_flight", "producers", "consumer_groups")

# what a section says when the captures gave it nothing
_EMPTY_SECTION = {
    "groups": "No Kafka exchanges.",
    "consumer_lag": "No consumer lag: no answered Fetch gave a high watermark for a partition it fetched.",
    "committed_lag": "No committed offsets: no OffsetCommit, TxnOffsetCommit or OffsetFetch answer gave one.",
    "in_flight": "No requests in flight: no request was captured.",
    "producers": "No producers: no Produce request carried record batches v2.",
    "consumer_groups": "No consumer groups: no JoinGroup, SyncGroup or ConsumerGroupHeartbeat exchange.",
}


def tables(result: dict[str, Any], section: str | None = None) -> list[TextTable]:
    """The report as tables: ``section`` None, all of it (the groups' tables, the slowest
    exchanges, throughput, consumer lag, producers, consumer groups); else that view alone
    (``groups``: the groups' tables and the slowest exchanges)."""
    out: list[TextTable] = []
    if section in (None, "groups"):
        if result["groups"]:
            out += group_tables(result)
        if result.get("top"):
            out.append(top_table(result["top"]))
    if section is None:
        thr = throughput_table(result)
        if thr is not None:
            out.append(thr)
    for name, make in (("consumer_lag", lag_table), ("committed_lag", committed_lag_table),
                       ("in_flight", in_flight_table), ("producers", producer_table),
                       ("consumer_groups", group_table)):
        if section in (None, name):
            t = make(result)
            if t is not None:
                out.append(t)
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
                  [False, True, False, False, True, True, True, False], keys=2)
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
                  [False, True, False, False, True, True, True, False, True, True, True], keys=2)
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
    the max is counted from the first request of the capture. The committed columns (lag
    against the last stable offset) when a consumer reads read_committed."""
    rows = result.get("consumer_lag") or []
    if not rows:
        return None
    t0 = result["throughput"]["first_time"] or 0.0
    committed = any(r["isolation"] == "read_committed" for r in rows)
    t = TextTable("Consumer lag (records: high watermark - fetch offset"
                  + ("; committed: last stable offset)" if committed else ")"),
                  ["group / client id", "topic", "partition", "last", "max", "mean", "max at", "samples"]
                  + ["committed last", "committed max"] * committed,
                  [False, False, True, True, True, True, True, True] + [True, True] * committed, keys=3)
    for r in rows:
        who = f"{r['group']} / {r['client_id']}" if r["group"] else fmt_key(r["client_id"])
        t.add([who, fmt_key(r["topic"]), fmt_key(r["partition"]), str(r["last"]), str(r["max"]),
               fmt_num(r["mean"]), f"+{r['max_time'] - t0:.3f}s", str(r["samples"])]
              + [fmt_key(r["stable_last"]), fmt_key(r["stable_max"])] * committed)
    return t


def committed_lag_table(result: dict[str, Any]) -> TextTable | None:
    """Committed-offset lag per group and topic-partition (as kafka-consumer-groups --describe):
    the latest high watermark seen minus the last committed offset, each with the time it was
    seen (from the first request); ``unknown`` where no high watermark came after the commit."""
    rows = result.get("committed_lag") or []
    if not rows:
        return None
    t0 = result["throughput"]["first_time"] or 0.0
    t = TextTable("Committed-offset lag (records: latest high watermark - last committed offset)",
                  ["group", "topic", "partition", "committed", "committed at", "high watermark", "hw at", "lag",
                   "owner (client id)"],
                  [False, False, True, True, True, True, True, True, False], keys=3)
    for r in rows:
        hw_at = r["high_watermark_time"]
        lag = str(r["lag"]) if r["lag"] is not None else r["note"]
        t.add([r["group"], fmt_key(r["topic"]), str(r["partition"]), str(r["committed_offset"]),
               f"+{r['commit_time'] - t0:.3f}s", fmt_key(r["high_watermark"]),
               f"+{hw_at - t0:.3f}s" if hw_at is not None else "-", lag, fmt_key(r["client_id"])])
    return t


def in_flight_table(result: dict[str, Any]) -> TextTable | None:
    """Requests in flight at once per client id (over its connections), then the connections
    with more than one: max (all APIs; Produce), requests by depth when sent, the APIs in
    flight together, and what the max says of max.in.flight.requests.per.connection."""
    inf = result.get("in_flight") or {}
    clients = inf.get("clients") or []
    if not clients:
        return None
    t = TextTable("Requests in flight at once (depth when each request was sent; per connection)",
                  ["client id / conn", "requests", "max", "max Produce", "1", "2", "3-5", "6+",
                   "APIs in flight together", "max.in.flight"],
                  [False, True, True, True, True, True, True, True, False, False], keys=1)
    rows = [(fmt_key(c["client_id"]), c) for c in clients] + \
        [(f"conn {c['conn']} ({fmt_key(c['client_id'])})", c) for c in inf.get("connections") or []
         if c["max_depth"] > 1]
    for who, c in rows:
        d = c["depths"]
        apis = ", ".join(f"{k} {n}" for k, n in list(c["overlapping_apis"].items())[:3]) or "-"
        t.add([who, str(c["requests"]), str(c["max_depth"]), str(c["max_produce_depth"]),
               str(d["1"]), str(d["2"]), str(d["3-5"]), str(d["6+"]), apis,
               c["max_in_flight"].split(": ", 1)[-1]])
    return t


def top_table(top: Sequence[dict[str, Any]]) -> TextTable:
    """The slowest exchanges (``figures.top``), slowest first: latency, time to
    first byte, API and version, connection (``FILE#ID`` when several captures were merged:
    connection and frame numbers are per capture), client and broker, request/response
    frame, wait and errors; ttfb and the broker are left out first where they do not fit."""
    many = any(r.get("capture") is not None for r in top)
    t = TextTable(f"Slowest {len(top)} exchanges",
                  ["#", "latency", "ttfb", "api", "conn", "client", "broker", "frames", "wait / errors"],
                  [True, True, True, False, not many, False, False, True, False], optional=("ttfb", "broker"))
    for i, r in enumerate(top, 1):
        api = r["api"] + (f" v{r['version']}" if r["version"] is not None else "")
        conn = fmt_key(r["conn"]) if r.get("capture") is None else f"{r['capture']}#{fmt_key(r['conn'])}"
        frames = f"{fmt_key(r['request_frame'])}/{fmt_key(r['response_frame'])}"
        why = "; ".join(([r["wait"]] if r["wait"] else []) + ([", ".join(r["error_codes"])] if r["error_codes"] else []))
        t.add([str(i), fmt_num(r["latency_ms"]), fmt_num(r["ttfb_ms"]), api, conn, fmt_key(r["client"]),
               fmt_key(r["broker"]), frames, why or "-"])
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
    return "Percentiles: nearest-rank, exact."


def render_text(result: dict[str, Any], console: Console, hists: dict[str, list[tuple[float, int]]] | None = None,
                plain: bool | None = None, section: str | None = None, width: int | None = None) -> None:
    """Print the report, or one ``section`` of it (see ``tables``): rich tables on a terminal,
    aligned plain text otherwise, laid out for ``width`` columns (the console's by default;
    ``stats`` gives plain text PLAIN_WIDTH). Under the tables, the lines saying how
    Kafka was found wrap at ``width``; the requests line is printed whole."""
    if plain is None:
        plain = not console.is_terminal
    if width is None:
        width = console.width

    def say(line: str) -> None:
        console.print(line, markup=False, highlight=False, soft_wrap=True)

    shown = tables(result, section)
    for t in shown:
        if plain:
            say(t.plain(width))
            console.print()
        else:
            for drawn in t.rich(width):
                console.print(drawn)
                console.print()
    if section is None:
        if not result["groups"]:
            say(_EMPTY_SECTION["groups"])
        for line in rate_lines(result):
            say(line)
        for line in connection_lines(result.get("connections")):
            for piece in _wrapped(line, width):
                say(piece)
    elif not shown:
        say(_EMPTY_SECTION[section])
    if hists:
        console.print()
        for line in histogram_lines(hists):
            say(line)
    if section in (None, "groups") and result["groups"]:
        say(accuracy_line(result))


# -- machine formats ---------------------------------------------------------------


def section_json(result: dict[str, Any], section: str | None) -> dict[str, Any]:
    """The JSON of ``stats --section``: the whole result (None), the groups with what
    qualifies them (``by``, ``top``, ``accuracy``), or the one section's list."""
    if section is None:
        return result
    if section == "groups":
        return {k: result[k] for k in ("by", "groups", "top", "accuracy")}
    return {section: result.get(section) or ({} if section == "in_flight" else [])}


def write_json(result: dict[str, Any], fp: IO[str]) -> None:
    json.dump(result, fp, indent=2, sort_keys=False)
    fp.write("\n")


_CSV_JOINED = ("errors", "waits")


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
    if section == "committed_lag":
        clag = result.get("committed_lag") or []
        header = list(clag[0]) if clag else ["group", "topic", "partition", "committed_offset", "lag", "note"]
        return header, [dict(r) for r in clag]
    if section == "in_flight":
        inf = result.get("in_flight") or {}
        rows = [{"scope": scope, "conn": r.get("conn"), "client": r.get("client"), "broker": r.get("broker"),
                 "client_id": r["client_id"], "requests": r["requests"], "max_depth": r["max_depth"],
                 "max_produce_depth": r["max_produce_depth"],
                 **{f"depth_{b}": n for b, n in r["depths"].items()},
                 "overlapping_apis": ";".join(f"{k}={n}" for k, n in r["overlapping_apis"].items()),
                 "max_in_flight": r["max_in_flight"]}
                for scope, key in (("client_id", "clients"), ("conn", "connections")) for r in inf.get(key) or []]
        header = list(rows[0]) if rows else ["scope", "conn", "client_id", "max_depth"]
        return header, rows
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


def lag_lines(result: dict[str, Any], lag: dict[str, list[tuple[float, int]]] | None
              ) -> list[tuple[str, list[float], list[int]]]:
    """What the lag panel draws: (name, seconds since the first request, lag) of the
    partitions with the highest lag, at most MAX_PLOT_LAGS, each figure at the time it was
    taken (``figures.lag_points``)."""
    t0 = result["throughput"]["first_time"] or 0.0
    ranked = sorted((lag or {}).items(), key=lambda kv: (-max((v for _t, v in kv[1]), default=0), kv[0]))
    return [(name, [t - t0 for t, _v in pts], [v for _t, v in pts]) for name, pts in ranked if pts][:MAX_PLOT_LAGS]


def committed_points(result: dict[str, Any]) -> list[tuple[str, float, int]]:
    """What the lag panel draws beside the position lag: each group-partition's committed-offset
    lag where the capture tells it (``committed_lag``), as (name, seconds since the first
    request at the high watermark it was taken against, lag); the largest, at most MAX_PLOT_LAGS."""
    t0 = result["throughput"]["first_time"] or 0.0
    pts = [(f"{r['group']} {r['topic']}-{r['partition']} committed", r["high_watermark_time"] - t0, r["lag"])
           for r in result.get("committed_lag") or () if r["lag"] is not None]
    return sorted(pts, key=lambda p: (-p[2], p[0]))[:MAX_PLOT_LAGS]


def plot_png(result: dict[str, Any], hists: dict[str, list[tuple[float, int]]],
             series: dict[str, list[tuple[int, int, float, float]]],
             points: dict[str, list[tuple[float, float]]] | None = None, title: str = "",
             lag: dict[str, list[tuple[float, int]]] | None = None) -> bytes:
    """A PNG: latency over time per API (log y) above one log-scale histogram per API; with
    ``lag`` (``figures.lag_points``), consumer lag over time below them (``lag_lines``)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

    counts = {api: sum(n for _e, n in b) for api, b in hists.items()}
    slowest, erring = plot_highlights(result, series)
    apis = plot_apis(counts, slowest, erring)
    ncols = 4 if len(apis) > 4 else max(1, len(apis))
    nrows_h = max(1, math.ceil(len(apis) / ncols))
    lags = lag_lines(result, lag)
    committed = committed_points(result)
    extra = 1 if lags or committed else 0
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
    if lags or committed:
        lx = fig.add_subplot(gs[1 + nrows_h, :])
        for name, when, lags_at in lags:
            lx.step(when, lags_at, where="post", label=name, marker="o", markersize=2.5)
        for name, when_c, lag_c in committed:
            lx.scatter([when_c], [lag_c], marker="D", s=36, label=name, zorder=3)
        lx.set_xlabel("seconds since first request")
        lx.set_ylabel("lag (records)")
        lx.set_title("consumer lag over time (high watermark - fetch offset, at each Fetch answer; "
                     "diamonds: committed-offset lag)")
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
               lag: dict[str, list[tuple[float, int]]] | None = None) -> None:
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
