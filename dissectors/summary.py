"""Per topic-partition digests of Produce and Fetch exchanges, from their field trees.

One dict per topic-partition: ``topic``, ``partition``, ``records`` (records or
messages after decompression: sent in a Produce request, returned in a Fetch
response; a truncated trailing batch is not counted), ``bytes`` (size of the
records field), ``codec``, ``crc_ok`` (False if any CRC in it failed) and
``error`` (the response's error name for that partition, or None).
"""
from __future__ import annotations

from typing import Any

from dissectors.errors import error_name
from dissectors.field import Field


def _topic(t: Field, topic_names: dict[str, str] | None) -> str | None:
    name = t.get("name")
    if name is None:
        name = t.get("topic")
    if name is None:
        tid = t.get("topic_id")
        if tid is not None:
            name = (topic_names or {}).get(tid, tid)
    return name


def _digest(topic: str | None, partition: Any, rec: Field | None) -> dict[str, Any]:
    """A partition's dict (without ``error``), built in one go: once per partition of every
    Produce and Fetch exchange."""
    if rec is None:
        return {"topic": topic, "partition": partition, "records": 0, "bytes": 0, "codec": None, "crc_ok": True}
    ex = rec.extra or {}
    return {
        "topic": topic,
        "partition": partition,
        "records": ex.get("records", rec.value if isinstance(rec.value, int) else 0),
        "bytes": ex.get("bytes", rec.length),
        "codec": ex.get("codec"),
        "crc_ok": ex.get("crc_ok", True),
    }


def _body(tree: Field | None) -> Field | None:
    return tree.child("body") if tree is not None else None


def partitions_of(api_key: int | None, request: Field | None, response: Field | None,
                  topic_names: dict[str, str] | None = None) -> list[dict[str, Any]]:
    if api_key == 0:
        return _produce(_body(request), _body(response), topic_names)
    if api_key == 1:
        return _fetch(_body(response), topic_names)
    return []


def _produce(req: Field | None, resp: Field | None, topic_names: dict[str, str] | None) -> list[dict[str, Any]]:
    errors: dict[tuple[str | None, int | None], str | None] = {}
    if resp is not None:
        for t in (resp.child("responses") or Field("", "")).children or ():
            tname = _topic(t, topic_names)
            for p in (t.child("partition_responses") or Field("", "")).children or ():
                code = p.get("error_code")
                errors[(tname, p.get("index"))] = error_name(code) if code else None
    out: list[dict[str, Any]] = []
    if req is None:
        return out
    for t in (req.child("topic_data") or Field("", "")).children or ():
        tname = _topic(t, topic_names)
        for p in (t.child("partition_data") or Field("", "")).children or ():
            idx = p.get("index")
            d = _digest(tname, idx, p.child("records"))
            d["error"] = errors.get((tname, idx))
            out.append(d)
    return out


def _fetch(resp: Field | None, topic_names: dict[str, str] | None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if resp is None:
        return out
    for t in (resp.child("responses") or Field("", "")).children or ():
        tname = _topic(t, topic_names)
        for p in (t.child("partitions") or Field("", "")).children or ():
            d = _digest(tname, p.get("partition_index"), p.child("records"))
            code = p.get("error_code")
            d["error"] = error_name(code) if code else None
            out.append(d)
    return out
