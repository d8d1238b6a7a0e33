"""Per topic-partition digests of Produce and Fetch exchanges, from their field trees.

One dict per topic-partition: ``topic``, ``partition``, ``records`` (records or
messages after decompression: sent in a Produce request, returned in a Fetch
response; a truncated trailing batch is not counted), ``bytes`` (size of the
records field), ``codec``, ``crc_ok`` (False if any CRC in it failed) and
``error`` (the response's error name for that partition, or None).

The partitions of Fetch requests and answers and of Produce requests are read from their
bodies' rows (``extra["fetch"]``, ``extra["produce"]``: see ``FetchRow``, ``FetchAsk``,
``ProduceRow``), which the core's walk reads (core/src/figures/; the pipeline puts them
in a full tree's body too); a Produce answer's errors from its tree.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dissectors.errors import error_name
from dissectors.field import Field

_NO_EXTRA: dict[str, Any] = {}


def _elements(parent: Field | None, name: str) -> list[Field] | tuple[()]:
    """The elements of ``parent``'s array child ``name`` (none when either is missing)."""
    if parent is not None:
        for c in parent.children or ():
            if c.name == name:
                return c.children or ()
    return ()


def _topic_partitions(body: Field, array: str, parts_name: str = "partitions"
                      ) -> Iterator[tuple[Any, Any, Field]]:
    """(topic, topic_id, partition element) of a body's topics array ``array`` (a Fetch
    request's ``topics``, an answer's ``responses``, a Produce request's ``topic_data``)
    whose partitions array is ``parts_name``, in wire order; the topic is its ``name``, else
    its ``topic``."""
    for t in _elements(body, array):
        name = topic = tid = None
        parts: Field | None = None
        for c in t.children or ():
            n = c.name
            if n == "name":
                name = c.value
            elif n == "topic":
                topic = c.value
            elif n == "topic_id":
                tid = c.value
            elif n == parts_name:
                parts = c
        for p in (parts.children or ()) if parts is not None else ():
            yield (name if name is not None else topic), tid, p


def _index_and(p: Field, name: str) -> tuple[Any, Field | None]:
    """(the ``index`` value, the child ``name``) of a Produce partition element, in one pass."""
    idx = other = None
    for c in p.children or ():
        n = c.name
        if n == "index":
            idx = c.value
        elif n == name:
            other = c
    return idx, other


# A Fetch answer's partition as its body's extra["fetch"] holds it: (topic, topic_id,
# partition, error_code (0 when none), high_watermark, last_stable_offset, records, bytes,
# codec, crc_ok), read by the core's walk (core/src/figures/, ``Figures::fetch_rows``),
# which, but for check, leaves the ``responses`` array they come from out of its lean tree.
# The partition digests and the consumer lag read the rows.
FetchRow = tuple[str | None, str | None, int | None, int, int | None, int | None, int, int, str | None, bool]

# A Fetch request's partition as its body's extra["fetch"] holds it: (topic, topic_id,
# partition, fetch_offset), read by the core's walk (``Figures::fetch_request_rows``), which
# leaves the ``topics`` array they come from out of its lean tree but where check's rules or
# a summary line read it.
FetchAsk = tuple[str | None, str | None, int | None, int | None]

# A Produce request's partition as its body's extra["produce"] holds it: (topic, topic_id,
# partition, records, bytes, codec, crc_ok, records_offset, records_length): its digest's
# figures and where its records field is (None and 0 without one), read by the core's walk
# (``Figures::produce_request_rows``), which leaves the ``topic_data`` array out of its lean
# tree but where check's rules or a summary line read it.
ProduceRow = tuple[str | None, str | None, int | None, int, int, str | None, bool, int | None, int]


def _table(body: Field | None, key: str) -> list[Any]:
    """A body's rows under ``key`` (none without a body, or for a body kept raw)."""
    if body is None or body.extra is None:
        return []
    return body.extra.get(key) or []


def produce_table(body: Field | None) -> list[ProduceRow]:
    """A Produce request body's rows."""
    return _table(body, "produce")


def fetch_table(body: Field | None) -> list[Any]:
    """A Fetch body's rows (an answer's ``FetchRow``s, a request's ``FetchAsk``s)."""
    return _table(body, "fetch")


def partitions_of(api_key: int | None, request: Field | None, response: Field | None,
                  topic_names: dict[str, str] | None = None) -> list[dict[str, Any]]:
    if api_key == 0:
        return _produce(request.child("body") if request is not None else None,
                        response.child("body") if response is not None else None, topic_names)
    if api_key == 1:
        return _fetch(response.child("body") if response is not None else None, topic_names)
    return []


def _produce(req: Field | None, resp: Field | None, topic_names: dict[str, str] | None) -> list[dict[str, Any]]:
    names = topic_names or _NO_EXTRA
    errors: dict[tuple[str | None, int | None], str | None] = {}
    if resp is not None:
        for topic, tid, p in _topic_partitions(resp, "responses", "partition_responses"):
            idx, code = _index_and(p, "error_code")
            errors[(_topic_name(topic, tid, names), idx)] = \
                error_name(code.value) if code is not None and code.value else None
    out: list[dict[str, Any]] = []
    for topic, tid, idx, records, nbytes, codec, crc_ok, _at, _n in produce_table(req):
        tname = _topic_name(topic, tid, names)
        out.append({"topic": tname, "partition": idx, "records": records, "bytes": nbytes, "codec": codec,
                    "crc_ok": crc_ok, "error": errors.get((tname, idx))})
    return out


def _topic_name(topic: str | None, tid: str | None, names: dict[str, str]) -> str | None:
    """A topic's name: its own, else the one its id was learnt with, else the id."""
    return topic if topic is not None else (names.get(tid, tid) if tid is not None else None)


def _fetch(resp: Field | None, topic_names: dict[str, str] | None) -> list[dict[str, Any]]:
    names = topic_names or _NO_EXTRA
    return [{"topic": _topic_name(topic, tid, names), "partition": idx, "records": records, "bytes": nbytes,
             "codec": codec, "crc_ok": crc_ok, "error": error_name(code) if code else None}
            for topic, tid, idx, code, _hw, _lso, records, nbytes, codec, crc_ok in fetch_table(resp)]
