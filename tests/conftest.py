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


def figures_db(exchanges: Any, capture: str = "test.pcap") -> Any:
    """A DuckDB connection whose ``exchanges``, ``partitions`` and ``batches`` tables hold the
    rows of ``exchanges`` (Exchange objects; analyzer.tables.exchange_rows), for the figures'
    queries."""
    from analyzer.engine import rows_db
    from analyzer.tables import BATCHES, EXCHANGES, PARTITIONS, exchange_rows

    rows: list[tuple[Any, ...]] = []
    parts: list[tuple[Any, ...]] = []
    batches: list[tuple[Any, ...]] = []
    for ex in exchanges:
        row, prows, brows = exchange_rows(ex, capture, ex.conn.id if ex.conn is not None else 0)
        rows.append(row)
        parts += prows
        batches += brows
    return rows_db([(EXCHANGES, rows), (PARTITIONS, parts), (BATCHES, batches)])


def stats_of(exchanges: Any, by: tuple[str, ...] = ("api", "version"), top: int = 0,
             views: tuple[str, ...] = ()) -> dict[str, Any]:
    """What ``stats -f json`` reports of ``exchanges`` (Exchange objects): the figures'
    queries over their rows (analyzer.figures.report) and the stories (Stories)."""
    from analyzer import engine, figures
    from analyzer.sinks.stats import Stories

    exs = list(exchanges)
    res = figures.report(engine.query_of(figures_db(exs)), by, top)
    told = Stories(views).add_all(exs).result()
    return {**{k: res[k] for k in ("by", "groups", "top", "throughput")}, "consumer_lag": told.pop("consumer_lag"),
            "producers": res["producers"], **told, "accuracy": res["accuracy"]}
