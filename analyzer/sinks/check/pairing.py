"""Rules on how requests and responses pair on a connection: responses to no request,
requests without response, responses out of order, correlation ids reused."""
from __future__ import annotations

from collections import Counter, OrderedDict
from dataclasses import replace
from typing import Any

from analyzer.model import Exchange

from .common import (
    MAX_LIST,
    REF_KEYS,
    Bucket,
    ConnState,
    Finding,
    Pending,
    Unit,
    allowance_ms,
    exchange_ref,
    literal_text,
    render,
    req_key,
    resp_key,
)

MAX_CORR_TRACKED = 1024     # correlation ids remembered per connection for the reuse rule

_ORPHAN_ERROR = "{count} response(s) matching no request on a connection seen from its start"
_ORPHAN_LOST = ("{count} response(s) to requests the capture missed (bytes of the client's side "
                "were not captured)")


class Orphans(Unit):
    """Responses to no request: info when the capture started mid-connection; on a
    connection seen from its start an error, unless the capture lost bytes of the client's
    side (judged at the end, when the losses are known)."""
    ids = ("orphan-response",)
    requestless = keyless = legacy = True

    def add(self, ex: Exchange, cs: ConnState) -> None:
        if ex.status != "orphan_response":
            return
        if cs.syn_seen:
            b = cs.orphans
            if b is None:
                b = cs.orphans = Bucket("orphan-response", "error", cs.name, _ORPHAN_ERROR, {})
        else:
            b = self.bucket("orphan-response", "info", cs, (),
                            "{count} response(s) to requests sent before the capture started", {})
        b.add(ex)

    def retire(self, cs: ConnState) -> bool:
        return cs.orphans is not None

    def conn_end(self, cs: ConnState, end: float) -> list[Finding]:
        if cs.orphans is None or "orphan-response" not in self.on:
            return []
        f = cs.orphans.finding(("capture start",))
        lost, client = cs.lost()
        if lost & (1 << client):
            # a request in bytes the capture missed (a lost segment): not the broker's fault
            f = replace(f, severity="info", message=_ORPHAN_LOST.format(**f.details), template=_ORPHAN_LOST)
        return [f]

    def merge_conn(self, mine: ConnState, other: ConnState) -> None:
        if other.orphans is not None:
            if mine.orphans is None:
                mine.orphans = other.orphans
            else:
                mine.orphans.merge(other.orphans)


class Answers(Unit):
    """Each request's answer: responses out of request order (as they come), requests left
    without one (judged at the end: passed over by the broker, waiting when the connection
    closed, or when the capture ended)."""
    ids = ("response-order", "unanswered-request", "closed-in-flight")
    keyless = True
    legacy = True

    def add(self, ex: Exchange, cs: ConnState) -> None:
        rk = req_key(ex)
        if rk is None:
            return
        if ex.status in ("ok", "malformed") and ex.response is not None:
            last = cs.last_answered
            if last is not None and rk < last and "response-order" in self.on:
                b = self.bucket("response-order", "error", cs, (),
                                "{count} response(s) arrived before the response to an earlier request", {},
                                advice="a broker bug (Kafka answers a connection's requests in order), or a proxy "
                                       "between client and broker that reorders them")
                b.add(ex)
            if last is None or rk > last:
                cs.last_answered = rk
        elif ex.status == "unanswered":
            if cs.unanswered is None:
                cs.unanswered = []
            cs.unanswered.append(Pending(exchange_ref(ex), rk, ex.request_time or 0.0, allowance_ms(ex)))

    def retire(self, cs: ConnState) -> bool:
        return bool(cs.unanswered)

    def merge_conn(self, mine: ConnState, other: ConnState) -> None:
        if other.unanswered:
            mine.unanswered = (mine.unanswered or []) + other.unanswered

    def conn_end(self, cs: ConnState, end: float) -> list[Finding]:
        if not cs.unanswered:
            return []
        out: list[Finding] = []
        if cs.closed:
            end = cs.last_ts
        # requests the broker passed over (later ones on the connection were answered): not
        # in flight when the connection closed, but skipped
        skipped = [p for p in cs.unanswered if cs.last_answered is not None and p.req_key < cs.last_answered]
        waiting = [p for p in cs.unanswered if p not in skipped]
        if cs.closed and "closed-in-flight" in self.on:
            if waiting:
                how = "reset (RST)" if cs.closed == "rst" else "closed (FIN)"
                fix = ""
                if cs.closer == "broker":
                    sev, who = "error", f"the broker {how} the connection"
                    fix = ("look in the broker's log for why it closed the connection: a broker closes it on a "
                           "request it does not take (an unknown API or version, a SASL mechanism it does not "
                           "enable, a request over socket.request.max.bytes, failed authentication)")
                elif cs.closer == "client":
                    sev, who = "info", f"the client {how} the connection"
                else:
                    sev, who = ("warning" if cs.closed == "rst" else "info"), f"connection {how}"
                out.append(_pending("closed-in-flight", sev, cs, waiting, end, who + " with {count} request(s) "
                                    "in flight ({names}), {age} after the oldest was sent", fix, who,
                                    closed=cs.closed, closed_by=cs.closer))
            waiting = []     # in flight at the close: closed-in-flight, above, judged them
        if "unanswered-request" not in self.on:
            return out
        late = [p for p in waiting if (end - p.request_time) * 1000.0 > p.allowance_ms + self.settings.slow_ms]
        recent = [p for p in waiting if p not in late]
        lost, client = cs.lost()
        if lost & (1 << (1 - client)):
            # the capture missed bytes of the broker's side: their responses may be there
            skip = ("info", "got no response the capture shows, although later requests were answered "
                            "(bytes of the broker's side were not captured)", "")
        else:
            skip = ("error", "got no response although later requests on the connection were answered",
                    "a broker bug (a broker answers each request of a connection, in order): look in its log "
                    "around the time these requests were sent")
        for pending, sev, what, fix in (
                (skipped, *skip),
                (late, "warning", "got no response before the capture ended", ""),
                (recent, "info", "were still waiting when the capture ended", "")):
            if pending:
                out.append(_pending("unanswered-request", sev, cs, pending, end, "{count} request(s) ({names}) "
                                    + what + ", the oldest sent {age} before the end", fix, what, listed=True))
        return out


def _pending(rule: str, sev: str, cs: ConnState, pending: list[Pending], end: float, template: str, fix: str,
             story: str, listed: bool = False, **details: Any) -> Finding:
    """A finding on requests without response: ``template`` over {count}, {names} (their
    APIs and versions, most common first) and {age} (how long the oldest waited); ``listed``:
    each one's wait in the details."""
    waits = [max(0.0, (end - p.request_time) * 1000.0) for p in pending]
    c = Counter(f"{p.ref['api_name']} v{p.ref['api_version']}" for p in pending)
    names = ", ".join(f"{n}x{k}" if n > 1 else k for k, n in c.most_common(4)).replace(" v None", "")
    tmpl = template.replace("{names}", literal_text(names))
    det = {"count": len(pending), **details, "max_wait_ms": round(max(waits), 3)}
    if listed:
        det["waited_ms"] = [round(w, 3) for w in waits][:MAX_LIST]
    return Finding(rule, sev, render(tmpl, det), cs.name, sorted({p.ref["request_frame"] for p in pending})[:MAX_LIST],
                   [p.ref for p in pending][:MAX_LIST], det, advice=fix or None, story=(story, names),
                   template=tmpl, advice_template=literal_text(fix))


class CorrelationReuse(Unit):
    """A correlation id used again while a request with it is in flight."""
    ids = ("correlation-reuse",)
    keyless = True

    def add(self, ex: Exchange, cs: ConnState) -> None:
        rk = req_key(ex)
        cid = ex.correlation_id
        if rk is None or cid is None:
            return
        mine = (rk, resp_key(ex), (ex.api_name, ex.api_version, cid, ex.request_frame, ex.response_frame))
        corr = cs.corr
        if corr is None:
            corr = cs.corr = OrderedDict()
        prior = corr.get(cid)
        if prior is None:
            corr[cid] = [mine]
            if len(corr) > MAX_CORR_TRACKED:
                corr.popitem(last=False)
            return
        for other in prior:
            a, b = (other, mine) if other[0] <= mine[0] else (mine, other)
            # b was sent while a was in flight: a's response came after b's request, or never
            if a[1] is None or a[1] > b[0]:
                bucket = self.bucket("correlation-reuse", "error", cs, (),
                                     "{count} request(s) reused a correlation id still in flight", {},
                                     advice="a client bug (a correlation id must be unique among the requests in "
                                            "flight on a connection): upgrade the client")
                frames = [f for r in (a[2], b[2]) for f in r[3:] if f is not None]
                bucket.add(dict(zip(REF_KEYS, b[2], strict=True)), frames)
                break
        prior.append(mine)
        del prior[:-8]
        corr.move_to_end(cid)

    def retire(self, cs: ConnState) -> bool:
        cs.corr = None
        return False
