"""The driver's side of a Spark job's results: the tasks' partial states merged file by file
into the stories of `stats` and the findings of `check` (``gather``), the connections
renumbered in order of first packet per file as one process numbers them, and topic ids
settled; `stats`' figures as queries over the job's exchanges, batches and lag tables
(``stats_result``).

Topic ids. A Fetch (v13+) names topics by id; one process resolves an id with the name
learnt from a Metadata (or CreateTopics, DescribeTopicPartitions) response seen earlier on
*any* connection. Each connection group of a task decodes with its own DecodeContext, whose
``topic_names`` (``TopicNames``) records what it learns and the ids it could not resolve;
such groups are kept apart ("held"). Knowing every learning of the file, ``plan_redo``
renames an id learnt before the group's first lookup in the held groups' rows (what one
process gives); an id learnt between lookups (or any id with --with-trees, whose notes name
topics) sends the held groups through a second pass that decodes them again with the
file's learnings in packet order. The learnings travel as runs (``TopicNames.learnt``: an
entry per id and name, not per answer); the one case they cannot replay, an id given two
names on connections interleaved in time, is counted in the summary (``topic_ids_inexact``).
"""
from __future__ import annotations

import bisect
import functools
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from analyzer import figures
from analyzer.shards import LearntTable, learnt_ids, resolve_misses
from analyzer.sinks.check import Finding
from analyzer.sinks.stats import Stories
from analyzer.spark.inputs import JobConfig, Source, capture_label, capture_labels, capture_names
from analyzer.spark.tasks import COUNTERS, DECODE_COUNTERS, SUM_FIELDS, TAGS
from analyzer.tables import BATCHES, EXCHANGES, FETCH, LAG, PARTITIONS

State = tuple[int, dict[str, Any]]          # (file, a task's state of it)


def learnt_table(states: Iterable[State]) -> dict[int, LearntTable]:
    """file -> topic id -> (sorted packet numbers, names, exact) of everything the file's
    groups learnt (``learnt_ids`` of their runs)."""
    per_file: dict[int, list[list[Any]]] = {}
    for fid, st in states:
        per_file.setdefault(fid, []).extend(st["learnt"])
    return {fid: learnt_ids(ev) for fid, ev in per_file.items()}


def inexact_ids(table: dict[int, LearntTable]) -> int:
    """Topic ids whose learnings the second pass cannot replay exactly (``learnt_ids``: an id
    given two names on connections interleaved in time): its names may differ from `stats`."""
    return sum(1 for t in table.values() for ent in t.values() if not ent.exact)


@dataclass
class Redo:
    """What the first pass leaves to do about topic ids learnt on other connections."""
    table: dict[int, LearntTable]           # every learning of each file
    keys: set[tuple[Any, ...]]              # connection groups to decode again
    kept: list[State]                       # the first pass's states those groups do not replace
    rename: dict[int, dict[str, str]]       # per file, topic ids named after the fact


def plan_redo(states: list[State], cfg: JobConfig) -> Redo:
    """Decide what to do with the held states.

    For each topic id a held group failed to resolve: if no connection of the file had
    learnt it before the group's last lookup, one process would not have resolved it
    either (keep). If one name was learnt before the group's first lookup, one process
    resolves every lookup to that name: renaming the id in the held stories and rows
    gives exactly that. Otherwise (learnt between lookups), and whenever the trees' notes
    or a display filter's choice by topic need the names (--with-trees, -Y), the groups
    are decoded again with the file's topic ids known at each packet."""
    table = learnt_table(states)
    trees = cfg.with_trees or cfg.display_filter is not None
    redo = Redo(table, set(), [], {})
    for fid, st in states:
        if st.get("held"):
            again = False
            names: dict[str, str] = {}
            for m in st["misses"]:
                got, exact = resolve_misses(m, table.get(fid, {}), rename=not trees)
                names.update(got)
                again = again or not exact
            if again:
                redo.keys.update(st["groups"])
                continue
            if names:
                redo.rename.setdefault(fid, {}).update(names)
        redo.kept.append((fid, st))
    return redo


@dataclass
class JobResult:
    sources: list[Source]
    stories: Stories
    findings: list[Finding]
    summary: dict[str, Any]
    conn_ids: dict[int, list[int]]        # file -> sorted first packet numbers (index = conn id)
    # the figures of `stats -f json` (but its ``connections``), from the tables' queries and
    # the stories (``stats_result``): set once the job has queried its tables
    stats: dict[str, Any] = field(default_factory=dict)
    tasks: int = 0
    reads: int = 0
    redone: int = 0                       # connection groups decoded a second time (topic ids)
    renamed: int = 0                      # topic ids named after the fact (learnt on other connections)
    elapsed: float = 0.0

    def set_inexact(self, n: int) -> None:
        """Note the topic ids that ``inexact_ids`` counts (in the summary, when there are any)."""
        if n:
            self.summary["topic_ids_inexact"] = n


def remap_conn(conn_ids: dict[int, list[int]], fid: int, first_index: int) -> int:
    """The connection number `read` gives: the rank of its first packet in the file."""
    return bisect.bisect_left(conn_ids[fid], first_index)


def gather(states: Iterable[State], sources: list[Source], cfg: JobConfig, redo: Redo) -> JobResult:
    """Merge the per-task states into the stories of `stats` and the findings of `check`,
    file by file (the figures are the tables': ``stats_result``)."""
    per_file: dict[int, list[dict[str, Any]]] = {}
    for fid, st in states:
        per_file.setdefault(fid, []).append(st)
    many = len(sources) > 1
    total = cfg.new_stories()
    findings: list[Finding] = []
    conn_ids: dict[int, list[int]] = {}
    files: list[dict[str, Any]] = []
    tot: Counter[str] = Counter()
    for src in sources:
        sts = per_file.get(src.file_id, [])
        conns = sorted(i for st in sts for i in st["conns"])
        conn_ids[src.file_id] = conns
        told = cfg.new_stories()
        for st in sts:
            told.merge(Stories.from_state(st["stories"]))
        told.renumber_conns(functools.partial(remap_conn, conn_ids, src.file_id), capture_label(src, many))
        total.merge(told)
        checker = cfg.new_checker()
        for st in sts:
            checker.merge(st["checker"])
        metas = [m for st in sts for m in st["meta"]]
        last_ts = max((m["last_ts"] for m in metas if m["last_ts"] is not None), default=None)
        first_ts = min((m["first_ts"] for m in metas if m["first_ts"] is not None), default=None)
        fs = checker.finish(capture_end=last_ts)
        if many:
            for f in fs:
                f.capture = src.name
        findings.extend(fs)
        c: dict[str, Counter[str]] = {k: Counter() for k in COUNTERS}
        for st in sts:
            for k, v in st["counts"].items():
                c[k].update(v)
        for m in metas:
            c["skipped"].update(m.get("skipped") or {})
        warnings = [m["warning"] for m in sorted(metas, key=lambda m: m["start"]) if m.get("warning")]
        packets = sum(m["packets"] for m in metas)
        d: dict[str, Any] = {
            "capture": src.name, "packets": packets, "packets_skipped": dict(c["skipped"]),
            **{f: c["summary"].get(f, 0) for f in SUM_FIELDS}, "exchanges": dict(c["exchanges"]),
            "bytes_skipped": dict(c["bytes_skipped"]), "notes": dict(c["notes"]), "first_time": first_ts,
            "last_time": last_ts, **{k: c["counters"].get(k, 0) for k in DECODE_COUNTERS},
            "limits_hit": dict(c["limits"]), "detection": dict(c["detection"]), "findings": len(fs)}
        if warnings:
            d["capture_warning"] = warnings[0]
        files.append(d)
        tot["packets"] += packets
        tot["exchanges"] += sum(c["exchanges"].values())
        tot["connections"] += c["summary"].get("connections", 0)
        tot["findings"] += len(fs)
    summary = {"files": len(sources), "bytes": sum(s.size for s in sources), **dict(tot), "per_file": files}
    result = JobResult(sources, total, findings, summary, conn_ids, redone=len(redo.keys),
                       renamed=sum(len(v) for v in redo.rename.values()))
    result.set_inexact(inexact_ids(redo.table))
    return result


def stats_result(query: figures.Query, cfg: JobConfig, result: JobResult) -> dict[str, Any]:
    """What `stats -f json` gives for the job's captures (but its ``connections``), its keys in
    that order: the figures (the consumer lag and the producers among them), ``query`` run
    over the job's exchanges, batches and lag tables (their ``capture`` column the input as
    named, their connections numbered as `read` numbers them), and the gathered stories; the
    slowest exchanges with the `read` command that shows each."""
    rep = figures.report(query, figures.with_endpoints(cfg.by), cfg.top, capture_labels(result.sources))
    out = {"by": list(cfg.by), "groups": rep["groups"], "top": rep["top"], "throughput": rep["throughput"],
           "consumer_lag": rep["consumer_lag"], "producers": rep["producers"],
           **result.stories.result(figures.group_counts(query)),
           "accuracy": rep["accuracy"]}
    from analyzer.sinks.stats_render import add_show
    add_show(out["top"], capture_names(result.sources))
    return out


def finalize_rows(rows: Iterable[tuple[str, Any, tuple[Any, ...]]], conn_ids: dict[int, list[int]],
                  rename: dict[int, dict[str, str]] | None = None) -> Iterator[tuple[Any, ...]]:
    """Rows with their connection renumbered as `read` numbers it, and topic ids named
    where ``plan_redo`` decided so (in the exchanges' partitions, topic_partitions and
    fetch_session's asked and forgotten, and the topic of partitions, batches and lag)."""
    topic = {TAGS[t.name]: t.names.index("topic") for t in (PARTITIONS, BATCHES, LAG)}
    lists = (EXCHANGES.names.index("partitions"), EXCHANGES.names.index("topic_partitions"))
    fi = EXCHANGES.names.index("fetch_session")
    fetch_lists = tuple(i for i, c in enumerate(FETCH) if c.name in ("asked", "forgotten"))

    def named(items: list[Any], names: dict[str, str]) -> list[Any]:
        return [(names.get(p[0], p[0]), *p[1:]) for p in items]

    for tag, gkey, row in rows:
        row = row[:1] + (remap_conn(conn_ids, gkey[0], row[1]),) + row[2:]
        names = rename.get(gkey[0]) if rename else None
        if names:
            if tag in topic:
                ti = topic[tag]
                if row[ti] in names:
                    row = row[:ti] + (names[row[ti]],) + row[ti + 1:]
            elif tag == TAGS[EXCHANGES.name]:
                for i in lists:
                    if any(p[0] in names for p in row[i]):
                        row = row[:i] + (named(row[i], names),) + row[i + 1:]
                if (fs := row[fi]) is not None and any(p[0] in names for j in fetch_lists for p in fs[j]):
                    fs = tuple(named(v, names) if j in fetch_lists else v for j, v in enumerate(fs))
                    row = row[:fi] + (fs,) + row[fi + 1:]
        yield row
