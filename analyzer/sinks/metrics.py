"""``live --metrics``: the running figures of a capture as an OpenMetrics endpoint for Prometheus.

``LiveMetrics.add`` takes each exchange ``live`` produces (the ones ``live --stats`` takes);
``capture`` takes the capture's own health once a second; ``prune`` drops what has gone
quiet. ``MetricsServer`` serves ``LiveMetrics.collect`` from a thread of its own (the
``prometheus_client`` package's threaded WSGI server, content negotiation and writers, over a
dedicated ``CollectorRegistry``), so a scrape never waits for the capture loop beyond the
short lock that guards the figures.

The figures are stats' (analyzer.sinks.stats, analyzer.sinks.insights, analyzer.tables), not
a second version of them:

- latency: from the packet that completed the request to the packet that completed the
  response (``Exchange.latency_ms``), a histogram per API and version in seconds, with the
  exchange's wait kind as ``stats`` classifies it (``wait_kind``: ``fetch_max_wait``,
  ``join_group``, ``sync_group_follower``; ``none`` for service time), so service time is
  ``wait="none"`` and every answered request is the sum over ``wait``;
- bytes: Kafka frame bytes including the size prefix (``frame_bytes``); throttling:
  ``throttle_ms``; errors: the response's error code names, each occurrence counted, as
  ``stats`` counts them;
- consumer lag: the position lag (the high watermark minus the consumer's position) at the
  latest Fetch answer per client id and topic-partition, the figures of stats' ``lag`` table
  (``tables.fetch_lag``: each connection's Fetch sessions followed in order by the core's
  ``FetchSessions``), with the client's group (the one its group requests name most often);
  and ``CommittedLag`` (high watermark minus the last committed offset per group and
  topic-partition), fed the same exchanges.

Memory stays flat however long the capture runs and however many clients, topics and
groups the broker has:

- every metric family keeps at most ``max_series`` series; a new series beyond that is
  folded into one whose unbounded labels (client id, topic, group, partition, and API and
  version, which come from the wire) read ``other`` (a folded gauge shows the largest of
  the values folded into it), and ``kafkawire_metrics_folded_series_total`` counts the
  distinct series folded per family (exactly up to ``FOLD_MEMORY`` per family, then it
  forgets and may count one again);
- series by client id and by topic (counters), committed offsets and high watermarks are
  dropped once nothing updated them for ``SERIES_TTL`` seconds, a consumer's position lag
  after ``LAG_TTL``, which frees their place in the budget (a counter that comes back
  starts again from 0: a counter reset to Prometheus);
- the lag state behind the gauges keeps at most ``STATE_FACTOR * max_series`` entries
  (the least recently updated go first) and forgets the fetch sessions of connections
  that ended.
"""
from __future__ import annotations

import gzip
import socket
import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import ThreadingWSGIServer, choose_encoder, gzip_accepted
from prometheus_client.openmetrics import exposition as om
from prometheus_client.registry import CollectorRegistry

from analyzer._core import FetchSessions
from analyzer.model import Conn, Exchange
from analyzer.sinks.insights import COMMITTED_APIS, GROUP_MEMBER_APIS, CommittedLag
from analyzer.sinks.stats import frame_bytes, throttle_ms, wait_kind
from analyzer.tables import fetch_lag
from dissectors.field import body_of

OTHER = "other"
NO_WAIT = "none"
# seconds: 0.1 ms to 30 s on the 1-2-5 scale stats' histograms use (a Fetch long poll waits
# up to fetch.max.wait.ms, 500 ms by default; request.timeout.ms is 30 s)
LATENCY_BUCKETS: tuple[float, ...] = (0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2,
                                      0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0)
SERIES_TTL = 600.0          # s: a client id's or a topic's counters, a committed offset, a high watermark
LAG_TTL = 60.0              # s: a consumer's position lag (an active consumer fetches every fetch.max.wait)
STATE_FACTOR = 4            # lag entries kept per series of the budget
FOLD_MEMORY = 65_536        # distinct folded series remembered per family (for the folded count)
PRUNE_EVERY = 5.0           # s between two prunings
_LAG_APIS = frozenset({1}) | GROUP_MEMBER_APIS | COMMITTED_APIS
_STATUSES = ("ok", "unanswered", "no_response_expected", "orphan_response", "malformed")


class MetricsError(Exception):
    """The endpoint cannot be served (bad address, port in use): one line for the user."""


def _str(v: Any) -> str:
    return "" if v is None else str(v)


# ---------------------------------------------------------------- bounded families


class _Family:
    """The series of one metric family, at most ``budget`` of them; the rest fold into the
    series whose labels (but those in ``keep``) read ``other``."""

    def __init__(self, name: str, doc: str, labels: tuple[str, ...], budget: int, keep: tuple[str, ...] = (),
                 unit: str = "", ttl: float | None = None) -> None:
        self.name = name
        self.doc = doc
        self.labels = labels
        self.unit = unit
        self.budget = budget
        self.ttl = ttl
        self._keep = tuple(i for i, label in enumerate(labels) if label in keep)
        self.values: dict[tuple[str, ...], Any] = {}
        self.seen: dict[tuple[str, ...], float] = {}        # (with a ttl) series -> last update
        self.folded = 0                                     # distinct series folded
        self._folded_keys: set[int] = set()

    def fold(self, key: tuple[str, ...]) -> tuple[str, ...]:
        """The ``other`` series ``key`` folds into (``key`` counted as folded the first time)."""
        h = hash(key)
        if h not in self._folded_keys:
            if len(self._folded_keys) >= FOLD_MEMORY:
                self._folded_keys.clear()
            self._folded_keys.add(h)
            self.folded += 1
        keep = self._keep
        return tuple(v if i in keep else OTHER for i, v in enumerate(key))

    def admit(self, key: tuple[str, ...]) -> tuple[str, ...]:
        """A series not yet in ``values``: its key, or its fold when the budget is spent."""
        return key if len(self.values) < self.budget else self.fold(key)

    def expire(self, now: float) -> None:
        if self.ttl is None:
            return
        cutoff = now - self.ttl
        for key in [k for k, t in self.seen.items() if t < cutoff]:
            del self.seen[key]
            self.values.pop(key, None)


class _Counter(_Family):
    def inc(self, key: tuple[str, ...], n: float = 1, now: float = 0.0) -> None:
        values = self.values
        v = values.get(key)
        if v is None:
            key = self.admit(key)
            v = values.get(key, 0)
        values[key] = v + n
        if self.ttl is not None:
            self.seen[key] = now

    def metric(self) -> Metric:
        m = CounterMetricFamily(self.name, self.doc, labels=self.labels, unit=self.unit)
        for key, v in self.values.items():
            m.add_metric(key, v)
        return m


class _Histogram(_Family):
    """Per series: [count per bucket ..., count above the last bucket, sum]."""

    def observe(self, key: tuple[str, ...], v: float) -> None:
        values = self.values
        row = values.get(key)
        if row is None:
            key = self.admit(key)
            row = values.get(key)
            if row is None:
                row = values[key] = [0] * (len(LATENCY_BUCKETS) + 1) + [0.0]
        row[bisect_left(LATENCY_BUCKETS, v)] += 1
        row[-1] += v

    def metric(self) -> Metric:
        m = HistogramMetricFamily(self.name, self.doc, labels=self.labels, unit=self.unit)
        for key, row in self.values.items():
            cumulative = 0
            buckets = []
            for bound, n in zip((*map(repr, LATENCY_BUCKETS), "+Inf"), row[:-1], strict=True):
                cumulative += n
                buckets.append((bound, cumulative))
            m.add_metric(key, buckets, row[-1])
        return m


class _Gauge(_Family):
    """Values computed at each scrape; a series keeps its place in the budget while it
    has a value."""

    def metric(self, values: Iterable[tuple[tuple[str, ...], float]]) -> Metric:
        slots = self.values
        present: set[tuple[str, ...]] = set()
        out: dict[tuple[str, ...], float] = {}
        for key, v in values:
            if key not in slots:
                if len(slots) < self.budget:
                    slots[key] = True
                else:
                    key = self.fold(key)
            present.add(key)
            old = out.get(key)
            out[key] = v if old is None else max(old, v)
        for key in [k for k in slots if k not in present]:
            del slots[key]
        m = GaugeMetricFamily(self.name, self.doc, labels=self.labels, unit=self.unit)
        for key, v in out.items():
            m.add_metric(key, v)
        return m


# ---------------------------------------------------------------- lag, kept bounded


def _drop_oldest(d: dict[Any, Any], when: Callable[[Any], float], cutoff: float, cap: int) -> None:
    """Entries of ``d`` last updated before ``cutoff`` go; then the oldest while over ``cap``."""
    for k in [k for k, v in d.items() if when(v) < cutoff]:
        del d[k]
    if len(d) > cap:
        for k, _v in sorted(d.items(), key=lambda kv: when(kv[1]))[:len(d) - cap]:
            del d[k]


class _LiveLag:
    """Consumer lag as a monitor keeps it: per (client id, topic, partition) the lag at the
    latest Fetch answer (``tables.fetch_lag``: the connections' Fetch sessions, in order, as
    ``stats`` follows them), and per (client id, group) the requests of ``GROUP_MEMBER_APIS``
    that name the group. ``names``: the run's topic names by id (``DecodeContext.topic_names``),
    for the Fetches that name topics by id; ``prune`` keeps it all bounded."""

    def __init__(self, names: Mapping[str, str] | None = None) -> None:
        self.names = names
        self.sessions = FetchSessions()
        self.lags: dict[tuple[str | None, str, int], tuple[float, int]] = {}   # -> (answer time, lag)
        self.members: dict[tuple[str | None, str], int] = {}    # (client id, group) -> requests
        self.member_seen: dict[str | None, float] = {}          # client id -> its latest group request
        self.conns: dict[int, Conn] = {}                        # connections whose Fetches are followed

    def add(self, ex: Exchange) -> None:
        if ex.api_key == 1:
            if ex.response is None:
                return
            self.conns[ex.conn.id] = ex.conn
            t, cid, lags = ex.response.last_ts, ex.client_id, self.lags
            for topic, partition, _pos, _hw, _lso, lag, _stable in fetch_lag(ex, ex.conn.id, self.sessions,
                                                                             self.names):
                key = (cid, topic, partition)
                old = lags.get(key)
                if old is None or (t, lag) > old:      # (the latest answer; the largest lag of one instant)
                    lags[key] = (t, lag)
        elif ex.api_key in GROUP_MEMBER_APIS:
            body = body_of(ex.request_tree)
            group = body.get("group_id") if body is not None else None
            fr = ex.response or ex.request
            if isinstance(group, str) and group and fr is not None:
                k = (ex.client_id, group)
                self.members[k] = self.members.get(k, 0) + 1
                self.member_seen[ex.client_id] = fr.last_ts

    def prune(self, now: float, cap: int) -> None:
        """Lags quiet for ``LAG_TTL`` go, then the oldest past ``cap``; the groups of clients
        with neither a lag nor a group request for ``SERIES_TTL``; the sessions of the
        connections that ended."""
        _drop_oldest(self.lags, lambda v: v[0], now - LAG_TTL, cap)
        _drop_oldest(self.member_seen, float, now - SERIES_TTL, cap)
        clients = {k[0] for k in self.lags} | self.member_seen.keys()
        self.members = {k: n for k, n in self.members.items() if k[0] in clients}
        for conn_id in [i for i, c in self.conns.items() if c.ended]:
            self.sessions.closed(conn_id)
            del self.conns[conn_id]

    def latest(self) -> list[tuple[str | None, str | None, str, int, int]]:
        """(group, client id, topic, partition, lag at the latest answer) per entry; a client's
        group is the one its requests name most often (on a tie, the first by name)."""
        best: dict[str | None, tuple[int, str]] = {}
        for (cid, group), n in self.members.items():
            b = best.get(cid)
            if b is None or (-n, group) < b:
                best[cid] = (-n, group)
        return [(best[cid][1] if cid in best else None, cid, t, p, lag) for (cid, t, p), (_t, lag) in self.lags.items()]


def _prune_committed(c: CommittedLag, now: float, cap: int) -> None:
    for d in (c.commits, c.hws, c.owners):
        _drop_oldest(d, lambda v: float(v[1]), now - SERIES_TTL, cap)


# ---------------------------------------------------------------- the figures


class LiveMetrics:
    """The figures of a live capture, fed by its exchanges; ``collect`` is the scrape.
    ``names``: the run's topic names by id (``DecodeContext.topic_names``, as it grows), which
    the consumer lag of Fetches that name topics by id needs (``lag.names`` may be set later)."""

    def __init__(self, max_series: int, clock: Callable[[], float] = time.time,
                 names: Mapping[str, str] | None = None) -> None:
        if max_series < 1:
            raise ValueError("max_series must be at least 1")
        self.max_series = n = max_series
        self.clock = clock
        self._lock = threading.Lock()
        self._now = clock()
        self._pruned = self._now
        api_v = ("api", "version")
        self.requests = _Counter("kafkawire_requests", "Kafka requests seen, by API and version "
                                 "(every exchange with a request)", api_v, n)
        self.exchanges = _Counter("kafkawire_exchanges", "Exchanges by status (ok, unanswered, "
                                  "no_response_expected, orphan_response, malformed)", ("status",), n,
                                  keep=("status",))
        self.unanswered = _Counter("kafkawire_unanswered_requests", "Requests that got no response within "
                                   "--timeout (or by the end of the capture)", api_v, n)
        self.orphans = _Counter("kafkawire_orphan_responses", "Responses whose request was not captured",
                                (), n)
        self.errors = _Counter("kafkawire_errors", "Error codes in responses, by API and error name (each "
                               "occurrence, as stats counts them)", ("api", "error"), n)
        self.bytes_in = _Counter("kafkawire_request_bytes", "Request frame bytes, client to broker (size "
                                 "prefix included)", ("api",), n, unit="bytes")
        self.bytes_out = _Counter("kafkawire_response_bytes", "Response frame bytes, broker to client (size "
                                  "prefix included)", ("api",), n, unit="bytes")
        self.throttled = _Counter("kafkawire_throttled_responses", "Responses with throttle_time_ms > 0",
                                  ("api",), n)
        self.throttle = _Counter("kafkawire_throttle_time_seconds", "Sum of the responses' throttle_time_ms",
                                 ("api",), n, unit="seconds")
        self.latency = _Histogram("kafkawire_request_latency_seconds", "Request completion to response "
                                  "completion; wait: why the broker held the request on purpose "
                                  "(fetch_max_wait, join_group, sync_group_follower) or none (service time)",
                                  ("api", "version", "wait"), n, keep=("wait",), unit="seconds")
        self.clients = _Counter("kafkawire_client_requests", "Requests by client id", ("client_id",), n,
                                ttl=SERIES_TTL)
        self.records = _Counter("kafkawire_topic_records", "Records produced (api=Produce) and fetched "
                                "(api=Fetch) by topic", ("api", "topic"), n, keep=("api",), ttl=SERIES_TTL)
        self.record_bytes = _Counter("kafkawire_topic_record_bytes", "Record batch bytes produced and "
                                     "fetched by topic", ("api", "topic"), n, keep=("api",), unit="bytes",
                                     ttl=SERIES_TTL)
        self.lag_gauge = _Gauge("kafkawire_consumer_lag_records", "Position lag: the high watermark minus the "
                                "fetch offset at the latest Fetch answer, by consumer (group, client id) and "
                                "topic-partition", ("group", "client_id", "topic", "partition"), n, unit="records")
        self.committed_gauge = _Gauge("kafkawire_consumer_committed_lag_records", "Committed lag: the latest "
                                      "high watermark minus the group's last committed offset",
                                      ("group", "topic", "partition"), n, unit="records")
        self._counters = (self.requests, self.exchanges, self.unanswered, self.orphans, self.errors,
                          self.bytes_in, self.bytes_out, self.throttled, self.throttle, self.clients,
                          self.records, self.record_bytes)
        self._families: tuple[_Family, ...] = (*self._counters, self.latency, self.lag_gauge,
                                               self.committed_gauge)
        # (series that exist from the start, at 0: a rate over them needs no first increase)
        self.orphans.values[()] = 0
        for status in _STATUSES:
            self.exchanges.values[(status,)] = 0
        self.lag = _LiveLag(names)
        self.committed = CommittedLag()
        # the capture's own health (``capture``)
        self.packets = 0
        self.kernel_dropped = 0
        self.packets_skipped: dict[str, int] = {}
        self.bytes_skipped: dict[str, int] = {}
        self.lost_bytes = 0
        self.open_connections = 0

    # -- feeding ---------------------------------------------------------------------
    def add(self, ex: Exchange) -> None:
        """One exchange, as ``live`` hands it on."""
        api = ex.api_name
        version = _str(ex.api_version)
        status = ex.status
        req, resp = ex.request, ex.response
        av = (api, version)
        lat = ex.latency_ms
        with self._lock:
            now = self._now
            self.exchanges.inc((status,))
            if status == "orphan_response":
                self.orphans.inc(())
            else:
                self.requests.inc(av)
                self.clients.inc((_str(ex.client_id),), 1, now)
                if status == "unanswered":
                    self.unanswered.inc(av)
            api1 = (api,)
            if req is not None:
                self.bytes_in.inc(api1, frame_bytes(req))
            if resp is not None:
                self.bytes_out.inc(api1, frame_bytes(resp))
            for e in ex.error_codes:
                self.errors.inc((api, e))
            if lat is not None:
                wait = wait_kind(ex, lat)
                self.latency.observe((api, version, wait or NO_WAIT), lat / 1000.0)
            thr = throttle_ms(ex)
            if thr:
                self.throttled.inc(api1)
                self.throttle.inc(api1, thr / 1000.0)
            if ex.partitions and api in ("Produce", "Fetch"):
                per: dict[str, list[int]] = {}
                for p in ex.partitions:
                    row = per.setdefault(_str(p.get("topic")), [0, 0])
                    row[0] += int(p.get("records") or 0)
                    row[1] += int(p.get("bytes") or 0)
                for topic, (r, b) in per.items():
                    self.records.inc((api, topic), r, now)
                    self.record_bytes.inc((api, topic), b, now)
            if ex.api_key in _LAG_APIS:
                self.lag.add(ex)
                self.committed.add(ex)

    def capture(self, packets: int, kernel_dropped: int | None, summary: Any, open_connections: int) -> None:
        """The capture's health: packets read, the kernel's drops, and from the pipeline's
        summary the packets not analysed, the bytes skipped and the bytes never captured."""
        with self._lock:
            self.packets = packets
            self.kernel_dropped = kernel_dropped or 0
            self.packets_skipped = dict(summary.packets_skipped)
            self.bytes_skipped = dict(summary.bytes_skipped)
            self.lost_bytes = summary.gap_bytes
            self.open_connections = open_connections

    def tick(self, now: float | None = None) -> None:
        """The clock of the series' last updates; prunes every PRUNE_EVERY seconds."""
        now = self.clock() if now is None else now
        self._now = now
        if now - self._pruned >= PRUNE_EVERY:
            self.prune(now)

    def prune(self, now: float) -> None:
        with self._lock:
            self._pruned = now
            for fam in self._counters:
                fam.expire(now)
            cap = STATE_FACTOR * self.max_series
            self.lag.prune(now, cap)
            _prune_committed(self.committed, now, cap)

    # -- the scrape ------------------------------------------------------------------
    def collect(self) -> list[Metric]:
        with self._lock:
            out = [fam.metric() for fam in self._counters]
            out.append(self.latency.metric())
            out.append(self.lag_gauge.metric(
                ((_str(group), _str(cid), _str(topic), _str(part)), lag)
                for group, cid, topic, part, lag in self.lag.latest()))
            out.append(self.committed_gauge.metric(
                ((r["group"], _str(r["topic"]), _str(r["partition"])), r["lag"])
                for r in self.committed.result() if r["lag"] is not None))
            out.append(_counter("kafkawire_capture_packets", "Packets read from the capture socket",
                                {(): self.packets}))
            out.append(_counter("kafkawire_capture_kernel_dropped_packets", "Packets the kernel dropped: "
                                "the capture socket's buffer was full (-B raises it)", {(): self.kernel_dropped}))
            out.append(_counter("kafkawire_capture_dropped_packets", "Packets read but not analysed, by reason",
                                {(k,): v for k, v in self.packets_skipped.items()}, ("reason",)))
            out.append(_counter("kafkawire_capture_lost_bytes", "TCP stream bytes never captured (gaps)",
                                {(): self.lost_bytes}, unit="bytes"))
            out.append(_counter("kafkawire_skipped_bytes", "Stream bytes not read as Kafka frames, by reason",
                                {(k,): v for k, v in self.bytes_skipped.items()}, ("reason",), unit="bytes"))
            g = GaugeMetricFamily("kafkawire_open_connections", "TCP connections open in the capture")
            g.add_metric((), self.open_connections)
            out.append(g)
            out.append(_counter("kafkawire_metrics_folded_series", "Distinct series folded into 'other' "
                                "beyond --metrics-max-series, by metric family",
                                {(f.name,): f.folded for f in self._families}, ("metric",)))
        return out


def _counter(name: str, doc: str, values: Mapping[tuple[str, ...], float], labels: tuple[str, ...] = (),
             unit: str = "") -> Metric:
    m = CounterMetricFamily(name, doc, labels=labels, unit=unit)
    for key, v in values.items():
        m.add_metric(key, v)
    return m


class _Collector:
    """What a CollectorRegistry asks of a collector: ``collect``."""

    def __init__(self, metrics: LiveMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterable[Metric]:
        return self.metrics.collect()


# ---------------------------------------------------------------- the endpoint


def _encoder(accept: str | None) -> tuple[Callable[[Any], bytes], str]:
    """prometheus_client's encoder and content type for the scraper's Accept header. Its
    OpenMetrics writer escapes each sample's name one character at a time under the default
    name escaping ("underscores": what Prometheus gets unless it asks otherwise), half the
    cost of a scrape; names that need no escaping (ours: kafkawire_[a-z_]+, and label names
    alike) come out the same under "allow-utf-8", which writes them without that loop."""
    encoder, content_type = choose_encoder(accept or "")
    kw = getattr(encoder, "keywords", None)
    if kw is not None and kw.get("escaping") == om.UNDERSCORES and getattr(encoder, "func", None) is om.generate_latest:
        encoder = partial(om.generate_latest, **{**kw, "escaping": om.ALLOWUTF8})
    return encoder, content_type


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """(no line per scrape on stderr)"""


class MetricsServer:
    """``/metrics`` (OpenMetrics or Prometheus text, as the scraper asks, gzip when it accepts
    it) on ``host:port``, served by a thread of its own (prometheus_client's threaded WSGI
    server) from a registry holding only ``metrics``."""

    def __init__(self, metrics: LiveMetrics, host: str, port: int) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(metrics))
        shown = f"[{host}]" if ":" in host else host
        try:
            family, _t, _p, _c, sockaddr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                               flags=socket.AI_PASSIVE)[0]

            class _Server(ThreadingWSGIServer):
                address_family = family

            self._httpd = make_server(str(sockaddr[0]), port, self._app, _Server, handler_class=_Quiet)
        except socket.gaierror as e:
            raise MetricsError(f"cannot serve metrics on {shown}:{port}: unknown host ({e.strerror or e})") from None
        except OSError as e:
            hint = {98: " (is another exporter on that port?)", 99: " (not an address of this machine)",
                    13: " (ports below 1024 need root)"}.get(e.errno or 0, "")
            raise MetricsError(f"cannot serve metrics on {shown}:{port}: {e.strerror or e}{hint}") from None
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="metrics", daemon=True)
        self._thread.start()
        self.host = host
        self.port = int(self._httpd.server_address[1])
        self.url = f"http://{shown}:{self.port}/metrics"

    def _app(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        if environ["REQUEST_METHOD"] != "GET":
            start_response("405 Method Not Allowed", [("Allow", "GET")])
            return [b""]
        encoder, content_type = _encoder(environ.get("HTTP_ACCEPT"))
        output = encoder(self.registry)
        headers = [("Content-Type", content_type)]
        if gzip_accepted(environ.get("HTTP_ACCEPT_ENCODING") or ""):
            output = gzip.compress(output)
            headers.append(("Content-Encoding", "gzip"))
        start_response("200 OK", headers)
        return [output]

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)
