"""Shared fixtures: where the samples and the shared captures are."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "samples"
SHARED = REPO.parent / "shared"
SHARED_CAPTURES = SHARED / "captures"


def shared_captures() -> Path:
    if not SHARED_CAPTURES.is_dir():
        pytest.skip("../shared/captures is not present")
    return SHARED_CAPTURES


def capture_paths() -> list[Path]:
    """The samples' captures, and the shared ones when ../shared is beside the clone."""
    paths = sorted(SAMPLES.glob("*.pcap*"))
    if SHARED_CAPTURES.is_dir():
        paths += sorted(SHARED_CAPTURES.rglob("*.pcap*"))
    return paths


def figures_db(exchanges: Any, capture: str = "test.pcap", names: dict[str, str] | None = None) -> Any:
    """A DuckDB connection whose tables (those the core builds: ``analyzer.tables.CORE_TABLES``)
    hold the rows of ``exchanges`` (Exchange objects, in order; analyzer.tables.exchange_rows),
    for the figures' queries; ``names``: the topic ids the run named (DecodeContext.topic_names)."""
    from analyzer._core import FetchSessions
    from analyzer.engine import rows_db
    from analyzer.tables import CORE_TABLES, exchange_rows

    tables: list[list[tuple[Any, ...]]] = [[] for _t in CORE_TABLES]
    sessions = FetchSessions()
    for ex in exchanges:
        rows = exchange_rows(ex, capture, ex.conn.id if ex.conn is not None else 0, names=names, sessions=sessions)
        tables[0].append(rows.exchange)
        for mine, theirs in zip(tables[1:], rows[1:], strict=True):
            mine += theirs
    return rows_db(list(zip(CORE_TABLES, tables, strict=True)))


def group_counts_of(exchanges: Any) -> dict[str, int]:
    """Each consumer group's exchanges among ``exchanges`` (the group stories' counts, a query
    over their rows: analyzer.figures.group_counts)."""
    from analyzer import engine, figures

    return figures.group_counts(engine.query_of(figures_db(list(exchanges))))


def stats_of(exchanges: Any, by: tuple[str, ...] = ("api", "version"), top: int = 0,
             views: tuple[str, ...] = (), names: dict[str, str] | None = None) -> dict[str, Any]:
    """What ``stats -f json`` reports of ``exchanges`` (Exchange objects): the figures'
    queries over their rows (analyzer.figures.report) and the stories (Stories)."""
    from analyzer import engine, figures
    from analyzer.sinks.stats import Stories

    exs = list(exchanges)
    query = engine.query_of(figures_db(exs, names=names))
    res = figures.report(query, by, top)
    told = Stories(views).add_all(exs).result(figures.group_counts(query))
    return {**{k: res[k] for k in ("by", "groups", "top", "throughput", "consumer_lag", "producers")}, **told,
            "accuracy": res["accuracy"]}
