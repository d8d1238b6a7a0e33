"""The rows of Produce and Fetch bodies (``extra["fetch"]``, ``extra["produce"]``) read off
full field trees: an oracle, independent of the core's walk (core/src/figures/), which is
what reads them in the product. Each topic and partition element in one pass over its
children."""
from __future__ import annotations

from typing import Any

from dissectors.field import Field
from dissectors.summary import FetchAsk, FetchRow, ProduceRow, _topic_partitions

_NO_EXTRA: dict[str, Any] = {}


def records_figures(rec: Field | None) -> tuple[int, int, str | None, bool]:
    """A records field's (records, bytes, codec, CRC verdict): its summary's (extra), else
    its value and length; (0, 0, None, True) without one."""
    if rec is None:
        return 0, 0, None, True
    ex = rec.extra
    if ex is None:
        ex = _NO_EXTRA
    v = rec.value
    # `in` and [] rather than dict.get(key, default): no call, no default computed
    return (ex["records"] if "records" in ex else (v if isinstance(v, int) else 0),
            ex["bytes"] if "bytes" in ex else rec.length,
            ex.get("codec"),
            ex["crc_ok"] if "crc_ok" in ex else True)




def fetch_rows(body: Field) -> None:
    """Read a full Fetch answer's partitions into ``body.extra["fetch"]``."""
    rows: list[FetchRow] = []
    for topic, tid, p in _topic_partitions(body, "responses"):
        idx = hw = lso = rec = None
        code = 0
        for c in p.children or ():
            n = c.name
            if n == "partition_index":
                idx = c.value
            elif n == "error_code":
                code = c.value or 0
            elif n == "high_watermark":
                hw = c.value
            elif n == "last_stable_offset":
                lso = c.value
            elif n == "records":
                rec = c
        rows.append((topic, tid, idx, code, hw, lso, *records_figures(rec)))
    _put_table(body, "fetch", rows)




def fetch_request_rows(body: Field) -> None:
    """Read a full Fetch request's partitions into ``body.extra["fetch"]``."""
    rows: list[FetchAsk] = []
    for topic, tid, p in _topic_partitions(body, "topics"):
        idx = off = None
        for c in p.children or ():
            n = c.name
            if n == "partition" or n == "partition_index":
                idx = c.value
            elif n == "fetch_offset":
                off = c.value
        rows.append((topic, tid, idx, off))
    _put_table(body, "fetch", rows)




def produce_request_rows(body: Field) -> None:
    """Read a full Produce request's partitions into ``body.extra["produce"]``."""
    rows: list[ProduceRow] = []
    for topic, tid, p in _topic_partitions(body, "topic_data", "partition_data"):
        idx = rec = None
        for c in p.children or ():
            n = c.name
            if n == "index":
                idx = c.value
            elif n == "records":
                rec = c
        rows.append((topic, tid, idx, *records_figures(rec),
                     rec.offset if rec is not None else None, rec.length if rec is not None else 0))
    _put_table(body, "produce", rows)


def _put_table(body: Field, key: str, rows: list[Any]) -> None:
    if body.extra is None:
        body.extra = {}
    body.extra[key] = rows


