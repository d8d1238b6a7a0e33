"""Sinks for exchanges: summary lines, field trees, JSON objects, the closing summary."""
from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from typing import Any, TextIO

from analyzer.model import Exchange
from analyzer.sinks.fastjson import dumps_line, dumps_tree
from dissectors.field import Field, json_value


def _ep(e: Any) -> str:
    return str(e)


def exchange_to_json(ex: Exchange, trees: bool = True, source: str | None = None) -> dict[str, Any]:
    """The ndjson object of one exchange (documented in the README)."""
    conn = ex.conn
    d: dict[str, Any] = {
        "conn": conn.id,
        "client": _ep(conn.client),
        "broker": _ep(conn.broker),
        "protocol": ex.protocol,
        "api_key": ex.api_key,
        "api_name": ex.api_name,
        "api_version": ex.api_version,
        "correlation_id": ex.correlation_id,
        "client_id": ex.client_id,
        "request_frame": ex.request_frame,
        "response_frame": ex.response_frame,
        "request_time": ex.request_time,
        "response_time": ex.response_time,
        "response_first_time": ex.response_first_time,
        "latency_ms": _round(ex.latency_ms),
        "ttfb_ms": _round(ex.ttfb_ms),
        "request_bytes": ex.request.size + 4 if ex.request else None,
        "response_bytes": ex.response.size + 4 if ex.response else None,
        "status": ex.status,
        "error_codes": list(ex.error_codes),
        "partitions": [{k: json_value(v) for k, v in p.items()} for p in ex.partitions],
        "notes": list(ex.notes),
    }
    if source is not None:
        d["capture"] = source
    if trees:
        d["request"] = ex.request_tree.to_json() if ex.request_tree is not None else None
        d["response"] = ex.response_tree.to_json() if ex.response_tree is not None else None
    return d


def exchange_json_line(ex: Exchange, source: str | None = None) -> bytes:
    """The ``read -f ndjson`` line of one exchange (no newline) in UTF-8: exactly
    ``dumps_line(exchange_to_json(ex, trees=True, source=source)).encode()``, faster (the
    trees go to JSON text without a dict tree in between, and never through a str)."""
    head = dumps_line(exchange_to_json(ex, trees=False, source=source)).encode()
    return b"".join((head[:-1], b',"request":', dumps_tree(ex.request_tree), b',"response":',
                     dumps_tree(ex.response_tree), b"}"))


def binary_writer(out: TextIO) -> Callable[[bytes], object]:
    """How to write UTF-8 bytes to the text stream ``out`` after the text written so far:
    to its binary buffer (the text flushed first), or decoded where it has none."""
    buf = getattr(out, "buffer", None)
    if buf is None:
        return lambda b: out.write(b.decode("utf-8", "backslashreplace"))
    out.flush()
    write: Callable[[bytes], object] = buf.write
    return write


def _round(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


# -- one line per exchange -----------------------------------------------------

def digest(ex: Exchange, width: int = 70) -> str:
    """A short description of what the exchange carried, one form per kind of API (README,
    ``read``), cut to ``width``:

    - Produce and Fetch: ``TOPIC[PARTITION:RECORDS,...] records=TOTAL (BYTES B)``, always:
      the topic-partitions a Produce request carried, or a Fetch answer returned, with their
      records. A Fetch answered without any partition lists those its request asked for,
      each with 0 records (``records=0 (0 B)``: an empty fetch of an incremental session
      names none); a Fetch without an answer lists them with ``-`` and ``records=-``, as
      does a Produce or Fetch whose records the capture cut off;
    - other APIs: ``group_id=``, ``transactional_id=``, ``mechanism=``, ``topics=`` as the
      request names them;
    - then the names of the error codes (``NAMExN`` for several)."""

    def records(rows: list[tuple[Any, Any, int | None]], nbytes: int | None) -> list[str]:
        # TOPIC[PARTITION:RECORDS,...] of (topic, partition, records or None: not known)
        by_topic: dict[str, list[str]] = {}
        for topic, partition, n in rows:
            by_topic.setdefault(str(topic), []).append(f"{partition}:{'-' if n is None else n}")
        out = [" ".join(f"{t}[{','.join(ps)}]" for t, ps in by_topic.items())] if by_topic else []
        out.append("records=-" if nbytes is None else f"records={sum(n or 0 for _t, _p, n in rows)} ({nbytes} B)")
        return out

    parts: list[str] = []
    if ex.partitions:
        parts.extend(records([(p.get("topic"), p.get("partition"), p.get("records") or 0) for p in ex.partitions],
                             sum(p.get("bytes") or 0 for p in ex.partitions)))
        if any(p.get("crc_ok") is False for p in ex.partitions):
            parts.append("CRC-INVALID")
    # (a Produce or Fetch of the 0.8+ protocol; read with getattr: tests/test_core_figures.py
    # digests bare request trees in a stand-in exchange)
    elif getattr(ex, "protocol", None) == "kafka" and getattr(ex, "api_key", None) in (0, 1):
        from dissectors.summary import fetch_table

        # the message that carries the records (a Produce request, a Fetch answer): not
        # captured, or cut by the capture, their count is not known
        carrier = ex.request if ex.api_key == 0 else ex.response
        known = carrier is not None and not carrier.truncated
        body = ex.request_tree.child("body") if ex.request_tree is not None and ex.api_key == 1 else None
        asked = [(topic if topic is not None else tid, idx, 0 if known else None)
                 for topic, tid, idx, *_rest in fetch_table(body)]
        parts.extend(records(asked, 0 if known else None))
    else:
        body = ex.request_tree.child("body") if ex.request_tree is not None else None
        if body is not None:
            for key in ("group_id", "transactional_id", "mechanism"):
                v = body.get(key)
                if isinstance(v, str) and v:
                    parts.append(f"{key}={v}")
            topics = body.child("topics") or body.child("topic_data")
            if topics is not None and topics.children:
                names = [str(t.get("name") or t.get("topic") or t.get("topic_id") or t.value)
                         for t in topics.children[:5]]
                more = len(topics.children) - 5
                parts.append("topics=" + ",".join(names) + (f",+{more}" if more > 0 else ""))
    if ex.error_codes:
        seen: dict[str, int] = {}
        for e in ex.error_codes:
            seen[e] = seen.get(e, 0) + 1
        parts.append(" ".join(f"{k}x{v}" if v > 1 else k for k, v in seen.items()))
    text = " ".join(parts)
    if len(text) > width:
        text = text[: width - 3] + "..."
    return text


def detection_lines(d: dict[str, Any], limit: int = 50) -> list[str]:
    """Why the Kafka connections were taken as Kafka, by port and each one found by
    auto-detection with its evidence, and the connections that were not Kafka (the block of
    ``Summary.connections_json``, or a summary's JSON), listing at most ``limit``."""
    by = d.get("detection") or {}
    ports = sorted(k for k in by if k != "auto")
    parts = [f"{k} {by[k]}" for k in ports] + ([f"auto-detected {by['auto']}"] if by.get("auto") else [])
    lines = ["kafka found by: " + ", ".join(parts)] if parts else []
    listed = (d.get("auto_detected") or [])[:limit]
    for a in listed:
        conn = f"{a['capture']}#{a['conn']}" if a.get("capture") else a["conn"]
        lines.append(f"  conn {conn} {a['client']} -> {a['broker']}: auto-detected ({a['evidence']})")
    if by.get("auto", 0) > len(listed):
        lines.append(f"  ... and {by['auto'] - len(listed)} more auto-detected")
    return lines


def summary_line(ex: Exchange, t0: float | None = None) -> str:
    frames = f"{ex.request_frame or '-':>6} {ex.response_frame or '-':>6}"
    t = ex.request_time if ex.request_time is not None else ex.response_time
    ts = f"{t - t0:11.6f}" if t is not None and t0 is not None else f"{t or 0:17.6f}"
    api = ex.api_name + (f" v{ex.api_version}" if ex.api_version is not None else "")
    cid = f"cid={ex.correlation_id}" if ex.correlation_id is not None else "cid=-"
    client_id = f"client_id={ex.client_id}" if ex.client_id else ""
    lat = f"{ex.latency_ms:.3f} ms" if ex.latency_ms is not None else ex.status.upper()
    status = "" if ex.status == "ok" or ex.latency_ms is None else f" [{ex.status}]"
    pieces = [frames, ts, str(ex.conn), api, cid]
    if client_id:
        pieces.append(client_id)
    d = digest(ex)
    if d:
        pieces.append(d)
    pieces.append(lat + status)
    return "  ".join(pieces)


# -- field trees -----------------------------------------------------------------

def value_text(f: Field, max_value_bytes: int = 64) -> str:
    v = f.value
    if isinstance(v, (bytes, bytearray, memoryview)):
        b = bytes(v)
        if len(b) > max_value_bytes:
            return f"{b[:max_value_bytes].hex()}... ({len(b)} bytes)"
        return b.hex() if b else "(empty)"
    if isinstance(v, str):
        if len(v) > max_value_bytes * 2:
            return repr(v[: max_value_bytes * 2]) + f"... ({len(v)} chars)"
        return repr(v)
    if v is None and f.type not in ("array", "records") and f.children:
        return ""
    return str(v)


def field_label(f: Field, max_value_bytes: int = 64) -> str:
    val = value_text(f, max_value_bytes)
    label = f"{f.name} ({f.type})"
    if val != "":
        label += f" = {val}"
    label += f"  @{f.offset}+{f.length}"
    if f.notes:
        label += "  [" + "; ".join(f.notes) + "]"
    return label


def tree_lines(f: Field, max_value_bytes: int = 64, indent: str = "") -> list[str]:
    """Plain-text rendering of a field tree (used when stdout is not a terminal)."""
    lines = [indent + field_label(f, max_value_bytes)]
    for c in f.children or ():
        lines.extend(tree_lines(c, max_value_bytes, indent + "  "))
    return lines


def rich_tree(f: Field, max_value_bytes: int = 64, tree: Any = None) -> Any:
    from rich.markup import escape
    from rich.tree import Tree

    def label(x: Field) -> str:
        val = value_text(x, max_value_bytes)
        s = f"[bold]{escape(x.name)}[/bold] [dim]({escape(x.type)})[/dim]"
        if val != "":
            s += f" = [cyan]{escape(val)}[/cyan]"
        s += f" [dim]@{x.offset}+{x.length}[/dim]"
        if x.notes:
            bad = any(n.startswith("malformed") or "INVALID" in n for n in x.notes)
            colour = "red" if bad else "yellow"
            s += f"  [{colour}]" + escape("; ".join(x.notes)) + f"[/{colour}]"
        return s

    node = Tree(label(f)) if tree is None else tree.add(label(f))
    for c in f.children or ():
        rich_tree(c, max_value_bytes, node)
    return node


def iso(ts: float | None) -> str:
    if ts is None:
        return "-"
    return _dt.datetime.fromtimestamp(ts, _dt.timezone.utc).isoformat().replace("+00:00", "Z")


# -- pointing at exchanges -----------------------------------------------------------

SHOW_FRAMES_MAX = 4        # more frames than this: a filter on the request frames instead


def read_command(capture: str, frames: list[int], exchanges: list[dict[str, Any]] | None = None) -> str:
    """The ``kafkawire-sniff read`` command that shows the exchanges at ``frames`` (packet
    numbers: a ``--frame`` each); for more than ``SHOW_FRAMES_MAX``, a filter on the request
    frames (the response frames of those without one) of ``exchanges`` (``check.exchange_ref``
    dicts) when they are given."""
    import shlex

    frames = sorted(dict.fromkeys(f for f in frames if f))
    head = f"kafkawire-sniff read {shlex.quote(capture)}"
    if len(frames) > SHOW_FRAMES_MAX and exchanges:
        reqs = sorted({e["request_frame"] for e in exchanges if e.get("request_frame")})
        resps = sorted({e["response_frame"] for e in exchanges
                        if not e.get("request_frame") and e.get("response_frame")})
        terms = [f"{k} in {{{' '.join(map(str, v))}}}" for k, v in (("request_frame", reqs),
                                                                   ("response_frame", resps)) if v]
        if terms:
            return f"{head} -Y {shlex.quote(' || '.join(terms))} -f tree"
    return head + "".join(f" --frame {f}" for f in frames) + " -f tree"
