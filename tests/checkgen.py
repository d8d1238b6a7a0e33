"""Builders of crafted Exchanges and Field trees for the check rules' tests.

A :class:`Wire` plays one TCP connection: each call to :meth:`Wire.ex` sends a request
(and usually its response) with increasing packet numbers and times, so tests read like
the capture they stand for:

    w = Wire()
    av = w.ex(18, 3, {}, {"error_code": 0, "api_keys": [{"api_key": 3, "min_version": 0, "max_version": 12}]})
    md = w.ex(3, 13, {"topics": None}, {"throttle_time_ms": 0})

Trees are built from plain values: a dict is a struct, a list an array (elements named
``[i]``), ints are int32, strings strings, bytes bytes. Pass a ready :class:`Field` to
set notes or extra (see :func:`records`).
"""
from __future__ import annotations

from typing import Any

from analyzer.model import Conn, Endpoint, Exchange, Frame
from dissectors.field import Field
from dissectors.kafka import versions_table
from dissectors.schema import api_name as schema_api_name
from tests.rows_reference import fetch_request_rows, fetch_rows, produce_request_rows


def api_name(key: int) -> str:
    return schema_api_name(key)


def field(name: str, value: Any) -> Field:
    """A Field tree from a plain value (see the module docstring)."""
    if isinstance(value, Field):
        value.name = name
        return value
    if isinstance(value, dict):
        return Field(name, "struct", None, children=[field(k, v) for k, v in value.items()])
    if isinstance(value, list):
        return Field(name, "array", len(value), children=[field(f"[{i}]", v) for i, v in enumerate(value)])
    if isinstance(value, bool):
        return Field(name, "bool", value)
    if isinstance(value, int):
        return Field(name, "int32", value)
    if isinstance(value, (bytes, bytearray)):
        return Field(name, "bytes", bytes(value))
    return Field(name, "string", value)


def tree(header: dict[str, Any], body: dict[str, Any] | None) -> Field:
    root = Field("frame", "struct", None, children=[field("header", header)])
    if body is not None:
        root.add(field("body", body))
    return root


def records(batches: list[dict[str, Any]] | None = None, notes: list[str] | None = None) -> Field:
    """A records field whose extra["batches"] carries batch summaries, as the record decoder writes them."""
    full = [dict({"magic": 2, "codec": "none", "crc_ok": True, "producer_epoch": 0}, **b) for b in batches or []]
    return Field("records", "records", None, notes=list(notes) if notes else None,
                 extra={"batches": full, "record_count": sum(b.get("record_count", 0) for b in full)})


def batch(pid: int, seq: int, count: int, epoch: int = 0) -> dict[str, Any]:
    return {"producer_id": pid, "producer_epoch": epoch, "base_sequence": seq, "record_count": count}


def produce_body(topic: str, partition: int, recs: Field, transactional_id: str | None = None) -> dict[str, Any]:
    return {"transactional_id": transactional_id, "acks": -1, "timeout_ms": 30000,
            "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": recs}]}]}


def produce_response(topic: str, partition: int, error_code: int = 0) -> dict[str, Any]:
    return {"responses": [{"name": topic, "partition_responses": [
        {"index": partition, "error_code": error_code, "base_offset": 0}]}], "throttle_time_ms": 0}


class Wire:
    """One crafted connection; packet numbers and times grow with each exchange."""

    def __init__(self, conn_id: int = 0, client_port: int = 40000, broker_port: int = 9092,
                 syn_seen: bool = True, t0: float = 1_700_000_000.0, frame: int = 4,
                 step_ms: float = 10.0) -> None:
        self.conn = Conn(conn_id, Endpoint("127.0.0.1", client_port + conn_id),
                         Endpoint("127.0.0.1", broker_port), syn_seen=syn_seen, client_dir=0,
                         protocol="kafka", first_ts=t0, last_ts=t0)
        self.t = t0
        self.frame = frame
        self.offset = [0, 0]
        self.step = step_ms / 1000.0
        self.corr = 0
        self.seq = 0

    def _frame(self, direction: int, ts: float, size: int = 64, truncated: bool = False) -> Frame:
        f = Frame(self.conn, direction, b"", size, self.frame, self.frame, ts, ts, self.offset[direction],
                  truncated=truncated)
        self.frame += 1
        self.offset[direction] += size + 4
        self.conn.last_ts = max(self.conn.last_ts, ts)
        return f

    def request(self, api_key: int, version: int, body: dict[str, Any] | None, *,
                corr: int | None = None, truncated: bool = False) -> tuple[Frame, Field, int]:
        """Send a request frame now; the exchange is made later by :meth:`answer`/:meth:`unanswered`."""
        self.t += self.step
        cid = self.corr if corr is None else corr
        if corr is None:
            self.corr += 1
        hdr = {"request_api_key": api_key, "request_api_version": version, "correlation_id": cid,
               "client_id": "checkgen"}
        qtree = tree(hdr, body)
        qbody = qtree.child("body")
        if api_key == 1 and qbody is not None:
            fetch_request_rows(qbody)      # (extra["fetch"], as the decoders write it)
        elif api_key == 0 and qbody is not None:
            produce_request_rows(qbody)    # (extra["produce"], as the decoders write it)
        return self._frame(0, self.t, truncated=truncated), qtree, cid

    def answer(self, sent: tuple[Frame, Field, int], body: dict[str, Any] | None, *, latency_ms: float = 2.0,
               error_codes: list[str] | None = None, status: str = "ok", truncated: bool = False,
               partitions: list[dict[str, Any]] | None = None) -> Exchange:
        req, qtree, cid = sent
        ts = req.last_ts + latency_ms / 1000.0
        self.t = max(self.t, ts)
        resp = self._frame(1, ts, truncated=truncated)
        rtree = tree({"correlation_id": cid}, body)
        rbody = rtree.child("body")
        if qtree.get_in("header", "request_api_key") == 18 and rbody is not None:
            versions_table(rbody)      # (extra["versions"], as the decoders write it)
        elif qtree.get_in("header", "request_api_key") == 1 and rbody is not None:
            fetch_rows(rbody)          # (extra["fetch"], as the decoders write it)
        return self._exchange(req, qtree, cid, resp, rtree, status, error_codes, partitions)

    def unanswered(self, sent: tuple[Frame, Field, int]) -> Exchange:
        req, qtree, cid = sent
        return self._exchange(req, qtree, cid, None, None, "unanswered", None, None)

    def ex(self, api_key: int, version: int, body: dict[str, Any] | None,
           response: dict[str, Any] | None = None, *, answered: bool = True, corr: int | None = None,
           **kw: Any) -> Exchange:
        """A request and (unless ``answered`` is False) its response."""
        sent = self.request(api_key, version, body, corr=corr, truncated=kw.pop("req_truncated", False))
        if not answered:
            return self.unanswered(sent)
        return self.answer(sent, response if response is not None else {"error_code": 0}, **kw)

    def orphan(self, api_key: int, version: int, corr: int) -> Exchange:
        self.t += self.step
        resp = self._frame(1, self.t)
        return Exchange(self.conn, "kafka", api_key, api_name(api_key), version,
                        corr, None, None, resp, "orphan_response",
                        response_tree=tree({"correlation_id": corr}, {"error_code": 0}))

    def idle(self, seconds: float) -> None:
        self.t += seconds
        self.conn.last_ts = max(self.conn.last_ts, self.t)

    def close(self, how: str = "fin", by: str | None = None) -> None:
        """End the connection with a FIN or RST, sent by "client", "broker" or an unknown side."""
        self.t += self.step
        self.frame += 1
        self.conn.closed = how
        if by is not None:
            self.conn.closed_by = 0 if by == "client" else 1
        self.conn.last_ts = self.t

    def _exchange(self, req: Frame, qtree: Field, cid: int, resp: Frame | None, rtree: Field | None,
                  status: str, error_codes: list[str] | None, partitions: list[dict[str, Any]] | None
                  ) -> Exchange:
        hdr = qtree.child("header")
        assert hdr is not None
        key, ver = hdr.get("request_api_key"), hdr.get("request_api_version")
        self.seq += 1
        return Exchange(self.conn, "kafka", key, api_name(key), ver, cid, "checkgen",
                        req, resp, status, qtree, rtree, list(error_codes or []), list(partitions or []),
                        seq=self.seq)


def completion_order(exchanges: list[Exchange]) -> list[Exchange]:
    """Exchanges as the pipeline hands them over: answered by response frame, unanswered last."""
    return sorted(exchanges, key=lambda e: (e.response_frame is None, e.response_frame or 0, e.seq))
