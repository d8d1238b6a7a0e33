"""The figures of ``stats``: queries over the tables (``analyzer.tables``), and the report
``stats`` prints, assembled from their rows.

``groups_query(by)`` is the SQL of ``stats``' groups (``top_query(n)``, of its N slowest
exchanges; ``throughput_query``, ``topic_partitions_query`` and ``per_second_query``, of its
throughput; ``histogram_query``, ``latency_series_query`` and ``points_query``, of what its
plots draw; ``views``, the views ``sql`` defines): one row per group of the ``--by`` keys,
with the columns of ``stats -f csv`` (counts by status, errors and waits as ``NAME=n;...``,
the latency, time-to-first-byte and service-time percentiles and means, bytes, throttling,
records), computed from the ``exchanges`` table alone: what ``stats --query`` prints for
``sql`` to run (DuckDB's SQL). Percentiles are nearest-rank and exact at any count: each
value ranked in its group by a window, which the engines sort on disk when it outgrows their
memory; means are of the latencies in nanoseconds (so that any order of summing gives one
mean).

``report(query, by, top)`` runs them with ``query`` (an engine: ``analyzer.engine`` on one
machine, Spark for the Spark job, through ``spark_sql``, which makes Spark SQL of the same
definition with sqlglot) and gives what ``stats -f json`` prints but the stories.
``tests/test_figures.py`` holds the queries to a reckoning in plain Python over every capture
of the corpus decoded in full, and their Spark SQL equal to them on Spark.

Grouping by ``topic`` or ``partition`` counts an exchange once under each topic-partition it
names (``topic_partitions``; none: under null), with that key's share of its partitions'
records, bytes and errors; ``conn`` groups by capture and connection (its numbers restart
per capture).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

# stats' group keys (--by), each with the exchanges table's column behind it (topic and
# partition: those of the topic-partitions an exchange names, below)
KEY_COLUMNS = {"api": "api_name", "version": "api_version", "client_id": "client_id",
               "client": "client", "broker": "broker", "topic": "topic", "partition": "partition",
               "conn": "conn"}

# the percentiles stats reports (name, fraction), nearest-rank
PERCENTILES: tuple[tuple[str, float], ...] = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p999", 0.999))


def _ranked(cte: str, names: Sequence[str], value: str, where: str) -> str:
    """A CTE ``cte``: per group of ``names``, the min, nearest-rank percentiles and max of
    ``value`` over the rows of ``s`` where ``where`` holds: each value ranked in its group by
    a window (a sort, which the engines spill to disk), not gathered into a list."""
    keys = ", ".join(names)
    pcts = ", ".join(f"max(v) FILTER (WHERE r = greatest(1, ceil({p} * n))) AS {label}" for label, p in PERCENTILES)
    return f"""{cte} AS (
  SELECT {keys}, min(v) AS mn, {pcts}, max(v) AS mx
  FROM (SELECT {keys}, v, row_number() OVER (PARTITION BY {keys} ORDER BY v) AS r,
               count(*) OVER (PARTITION BY {keys}) AS n
        FROM (SELECT {keys}, {value} AS v FROM s WHERE {where}) q) w
  GROUP BY {keys})"""


def _counted(cte: str, names: Sequence[str], values: str) -> str:
    """A CTE ``cte``: per group of ``names``, ``NAME=n;NAME=n`` (names sorted) of the names in
    the lists ``values`` of its rows of ``s``, counted by a grouping."""
    keys = ", ".join(names)
    return f"""{cte} AS (
  SELECT {keys}, array_to_string(list_transform(list_sort(list({{'name': name, 'n': n}})),
                                                lambda e: e.name || '=' || CAST(e.n AS VARCHAR)), ';') AS text
  FROM (SELECT {keys}, name, count(*) AS n
        FROM (SELECT {keys}, unnest({values}) AS name FROM s) q
        GROUP BY {keys}, name) c
  GROUP BY {keys})"""


def with_endpoints(by: tuple[str, ...]) -> tuple[str, ...]:
    """The group keys of ``by``, with ``client`` and ``broker`` after ``conn`` when ``conn`` is
    one of them and they are not: a connection's groups carry its endpoints (one each per
    connection: the same groups), so that a connection is shown with them."""
    if "conn" not in by:
        return by
    i = by.index("conn") + 1
    return by[:i] + tuple(k for k in ("client", "broker") if k not in by) + by[i:]


def groups_query(by: Sequence[str]) -> str:
    """The SQL of stats' groups for the ``--by`` keys ``by`` (of ``KEY_COLUMNS``)."""
    bad = [b for b in by if b not in KEY_COLUMNS]
    if bad or not by:
        raise ValueError(f"no such group key: {', '.join(bad) or '(none)'}")
    expand = bool({"topic", "partition"} & set(by))
    names = (["capture"] if "conn" in by else []) + list(by)
    keys = (["capture"] if "conn" in by else []) + \
        [b if b in ("topic", "partition") else f"{KEY_COLUMNS[b]} AS {b}" for b in by]
    if expand:
        # each exchange once per distinct key of the topic-partitions it names, with the
        # partitions that fall under that key
        tp = [b for b in ("topic", "partition") if b in by]
        match = " AND ".join(f"p.{b} IS NOT DISTINCT FROM k.{b}" for b in tp)
        source = f"""(SELECT e.*, {', '.join(f'k.{b}' for b in tp)},
          CASE WHEN array_length(e.partitions) > 0 THEN list_filter(e.partitions, lambda p: {match}) END AS pds
   FROM x e JOIN (SELECT DISTINCT ex, {', '.join(f't.{b} AS {b}' for b in tp)}
                  FROM (SELECT ex, unnest(CASE WHEN array_length(topic_partitions) = 0
                                               THEN [{{'topic': NULL::VARCHAR, 'partition': NULL::INTEGER}}]
                                               ELSE topic_partitions END) AS t FROM x) u) k ON e.ex = k.ex) j"""
        errs = ("CASE WHEN pds IS NULL THEN error_codes "
                "ELSE list_filter(list_transform(pds, lambda p: p.error), lambda e: e IS NOT NULL) END")
        parts = "coalesce(pds, [])"
    else:
        source, errs, parts = "x", "error_codes", "partitions"
    # (the topic expansion joins each exchange to its keys by a number of its own)
    number = ("row_number() OVER (ORDER BY capture, conn, request_frame, response_frame, correlation_id) AS ex, "
              if expand else "")
    group = ", ".join(names)

    def on(cte: str) -> str:
        return " AND ".join(f"g.{n} IS NOT DISTINCT FROM {cte}.{n}" for n in names)

    def summary(name: str, cte: str, total_ns: str, count: str) -> str:
        cols = [f"{cte}.mn AS {name}_min"] + [f"{cte}.{label} AS {name}_{label}" for label, _p in PERCENTILES]
        cols += [f"{cte}.mx AS {name}_max",
                 f"CASE WHEN {count} > 0 THEN round({total_ns} / {count} / 1e6, 3) END AS {name}_mean"]
        return ",\n       ".join(cols)

    return f"""WITH x AS (
  SELECT {number}*,
         round_even((response_time - request_time) * 1000.0 * 1e6, 0) AS lat_ns,
         round_even((response_first_time - request_time) * 1000.0 * 1e6, 0) AS ttfb_ns
  FROM exchanges),
s AS (
  SELECT {', '.join(keys)}, status, latency_ms, ttfb_ms, wait, lat_ns, ttfb_ns, request_bytes, response_bytes,
         throttle_ms, {errs} AS errs, {parts} AS parts
  FROM {source}),
g AS (
  SELECT {group},
         count(*) AS count,
         count(latency_ms) AS answered,
         count(*) FILTER (WHERE status = 'unanswered') AS unanswered,
         count(*) FILTER (WHERE status = 'orphan_response') AS orphans,
         count(*) FILTER (WHERE status = 'no_response_expected') AS no_response,
         count(*) FILTER (WHERE status = 'malformed') AS malformed,
         count(*) FILTER (WHERE array_length(errs) > 0) AS error_exchanges,
         sum(lat_ns) AS lat_ns, sum(ttfb_ns) AS ttfb_ns, sum(lat_ns) FILTER (WHERE wait IS NULL) AS svc_ns,
         count(latency_ms) FILTER (WHERE wait IS NULL) AS service,
         coalesce(sum(request_bytes), 0) AS bytes_in,
         coalesce(sum(response_bytes), 0) AS bytes_out,
         count(*) FILTER (WHERE throttle_ms > 0) AS throttled,
         sum(throttle_ms) AS throttle_time_ms_total,
         max(throttle_ms) AS throttle_time_ms_max,
         coalesce(sum(list_sum(list_transform(parts, lambda p: p.records))), 0) AS records,
         coalesce(sum(list_sum(list_transform(parts, lambda p: p.bytes))), 0) AS record_bytes
  FROM s
  GROUP BY {group}),
{_ranked("lat", names, "latency_ms", "latency_ms IS NOT NULL")},
{_ranked("ttfb", names, "ttfb_ms", "latency_ms IS NOT NULL")},
{_ranked("svc", names, "latency_ms", "latency_ms IS NOT NULL AND wait IS NULL")},
{_counted("err", names, "errs")},
wt AS (
  SELECT {group}, array_to_string(list_transform(list_sort(list({{'name': wait, 'n': n}})),
                                                 lambda e: e.name || '=' || CAST(e.n AS VARCHAR)), ';') AS text
  FROM (SELECT {group}, wait, count(*) AS n FROM s WHERE wait IS NOT NULL AND latency_ms IS NOT NULL
        GROUP BY {group}, wait) c
  GROUP BY {group})
SELECT {', '.join(f'g.{n} AS {n}' for n in names)}, count, answered, unanswered, orphans, no_response, malformed,
       coalesce(err.text, '') AS errors,
       error_exchanges,
       {summary('latency_ms', 'lat', 'g.lat_ns', 'answered')},
       {summary('ttfb_ms', 'ttfb', 'g.ttfb_ns', 'answered')},
       {summary('latency_ms_excl_waits', 'svc', 'g.svc_ns', 'service')},
       coalesce(wt.text, '') AS waits,
       service, bytes_in, bytes_out, throttled, throttle_time_ms_total, throttle_time_ms_max,
       records, record_bytes
FROM g LEFT JOIN lat ON {on('lat')} LEFT JOIN ttfb ON {on('ttfb')} LEFT JOIN svc ON {on('svc')}
       LEFT JOIN err ON {on('err')} LEFT JOIN wt ON {on('wt')}
ORDER BY {', '.join(f'g.{n} NULLS LAST' for n in names)}
"""


def top_query(n: int) -> str:
    """The SQL of stats' N slowest exchanges (``--top N``): the answered exchanges by latency,
    slowest first (ties: by connection, request frame, correlation id, capture), with the fields of
    stats' ``top`` records, and the capture."""
    return f"""SELECT api_name AS api, api_version AS version, correlation_id, conn, client, broker, client_id,
       request_frame, response_frame, request_time, latency_ms, ttfb_ms, wait, status, error_codes, capture
FROM exchanges
WHERE latency_ms IS NOT NULL
ORDER BY round(latency_ms, 3) DESC, coalesce(conn, -1), coalesce(request_frame, 0), coalesce(correlation_id, -1), capture
LIMIT {int(n)}
"""


# an exchange's time (its request's, else its response's) and its end (its response's, else
# its request's): what stats' span and seconds count by
_SPAN = """SELECT *, coalesce(request_time, response_time) AS t0, coalesce(response_time, request_time) AS t1
  FROM exchanges"""
_DURATION = "(SELECT greatest(0, max(t1) - min(t0)) FROM x)"


def throughput_query() -> str:
    """The SQL of stats' throughput figures: one row of the span (first_time, last_time,
    duration_s), the exchanges and the requests per second."""
    return f"""WITH x AS ({_SPAN})
SELECT min(t0) AS first_time, max(t1) AS last_time, round(greatest(0, max(t1) - min(t0)), 6) AS duration_s,
       count(*) AS exchanges,
       CASE WHEN max(t1) - min(t0) > 0 THEN round(count(t0) / (max(t1) - min(t0)), 3) END AS requests_per_s
FROM x
"""


def topic_partitions_query() -> str:
    """The SQL of stats' throughput per topic-partition: records and bytes produced (Produce
    requests) and fetched (Fetch answers), and their rates over the capture's span."""
    rate = "CASE WHEN {d} > 0 THEN round({v} / {d}, 3) END"
    rates = ",\n       ".join(rate.format(v=c, d="d.duration") + f" AS {c}_per_s"
                              for c in ("produced_records", "produced_bytes", "fetched_records", "fetched_bytes"))
    return f"""WITH x AS ({_SPAN}),
d AS (SELECT {_DURATION} AS duration),
p AS (SELECT api_name, unnest(partitions) AS p FROM x WHERE api_name IN ('Produce', 'Fetch')),
t AS (SELECT p.topic AS topic, p.partition AS partition,
             coalesce(sum(p.records) FILTER (WHERE api_name = 'Produce'), 0) AS produced_records,
             coalesce(sum(p.bytes) FILTER (WHERE api_name = 'Produce'), 0) AS produced_bytes,
             coalesce(sum(p.records) FILTER (WHERE api_name = 'Fetch'), 0) AS fetched_records,
             coalesce(sum(p.bytes) FILTER (WHERE api_name = 'Fetch'), 0) AS fetched_bytes
      FROM p GROUP BY ALL)
SELECT topic, partition, produced_records, produced_bytes, fetched_records, fetched_bytes,
       {rates}
FROM t, d
ORDER BY topic NULLS LAST, partition NULLS LAST
"""


def per_second_query() -> str:
    """The SQL of stats' per-second rows: by the second of each exchange's time, requests, and
    the records and bytes produced and fetched."""
    return f"""WITH x AS ({_SPAN}),
s AS (SELECT CAST(floor(t0) AS BIGINT) AS t, api_name,
             list_sum(list_transform(partitions, lambda p: p.records)) AS records,
             list_sum(list_transform(partitions, lambda p: p.bytes)) AS bytes
      FROM x)
SELECT t, count(*) AS requests,
       coalesce(sum(records) FILTER (WHERE api_name = 'Produce'), 0) AS produced_records,
       coalesce(sum(bytes) FILTER (WHERE api_name = 'Produce'), 0) AS produced_bytes,
       coalesce(sum(records) FILTER (WHERE api_name = 'Fetch'), 0) AS fetched_records,
       coalesce(sum(bytes) FILTER (WHERE api_name = 'Fetch'), 0) AS fetched_bytes
FROM s GROUP BY t ORDER BY t
"""


def histogram_query() -> str:
    """The SQL of stats' latency histograms: per API, the answered exchanges in each bucket of
    a 1-2-5 log scale in ms (``bucket``: 3 x the decade + 0, 1 or 2 for 1, 2, 5; ``lower_ms``
    its lower edge; latencies under 1 us in the lowest), the buckets they fill (stats' plots
    show the empty ones between as zeros)."""
    return """WITH v AS (SELECT api_name, greatest(latency_ms, 0.001) AS ms FROM exchanges WHERE latency_ms IS NOT NULL),
d AS (SELECT api_name, ms, floor(log10(ms)) AS d FROM v),
m AS (SELECT api_name, d, ms / pow(10.0, d) AS m FROM d),
b AS (SELECT api_name,
             CASE WHEN m >= 9.999999 THEN d + 1 ELSE d END AS d,
             CASE WHEN m >= 9.999999 THEN 1.0 ELSE m END AS m FROM m),
k AS (SELECT api_name, CAST(d * 3 + CASE WHEN m < 2.0 THEN 0 WHEN m < 5.0 THEN 1 ELSE 2 END AS BIGINT) AS bucket
      FROM b)
SELECT api_name AS api, bucket,
       CASE (bucket % 3 + 3) % 3 WHEN 0 THEN 1.0 WHEN 1 THEN 2.0 ELSE 5.0 END * pow(10.0, floor(bucket / 3.0))
         AS lower_ms,
       count(*) AS n
FROM k GROUP BY ALL ORDER BY api, bucket
"""


def latency_series_query() -> str:
    """The SQL of stats' latency over time (its plots): per API and second of the request,
    the answered exchanges, their mean latency (from nanoseconds, as stats sums them) and
    the largest."""
    return """SELECT api_name AS api, CAST(floor(request_time) AS BIGINT) AS t, count(*) AS n,
       sum(round_even((response_time - request_time) * 1000.0 * 1e6, 0)) / count(*) / 1e6 AS mean_ms,
       max((response_time - request_time) * 1000.0) AS max_ms
FROM exchanges WHERE latency_ms IS NOT NULL
GROUP BY ALL ORDER BY api, t
"""


def views() -> dict[str, str]:
    """The figures as named views over the tables, which ``sql`` defines: stats' groups by
    API and version, its 100 slowest exchanges, its throughput, per topic-partition and per
    second, its latency histograms and latency over time."""
    return {"stats_groups": groups_query(("api", "version")), "stats_top": top_query(100),
            "stats_throughput": throughput_query(), "stats_topic_partitions": topic_partitions_query(),
            "stats_per_second": per_second_query(), "stats_histogram": histogram_query(),
            "stats_latency_series": latency_series_query()}


def spark_sql(query: str) -> str:
    """A figure's query (DuckDB's SQL) in Spark SQL: sqlglot transpiles it, and the two
    functions it leaves as they are become Spark's (a list's sum: ``aggregate``; round half
    to even: ``bround``). Spark runs it with ANSI mode off (an empty list's element is null,
    as in DuckDB)."""
    import sqlglot
    from sqlglot import exp

    def spark(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Anonymous):
            name = str(node.this).upper()
            if name == "LIST_SUM":
                (values,) = node.expressions
                return sqlglot.parse_one("AGGREGATE(v, CAST(0 AS BIGINT), (a, x) -> a + x)", read="spark").transform(
                    lambda n: values.copy() if isinstance(n, exp.Column) and n.name == "v" else n)
            if name == "ROUND_EVEN":
                return exp.Anonymous(this="BROUND", expressions=[e.copy() for e in node.expressions])
        return node

    return sqlglot.parse_one(query, read="duckdb").transform(spark).sql(dialect="spark")


def points_query(cap: int = 50_000) -> str:
    """The SQL of the points stats' plots scatter: (API, request time, latency) of the
    answered exchanges, every k-th in time order, k the smallest that keeps at most ``cap``."""
    return f"""WITH p AS (
  SELECT api_name AS api, request_time AS t, latency_ms,
         row_number() OVER (ORDER BY request_time, conn, request_frame) AS i, count(*) OVER () AS n
  FROM exchanges WHERE latency_ms IS NOT NULL AND request_time IS NOT NULL)
SELECT api, t, latency_ms FROM p WHERE (i - 1) % CAST(greatest(1, ceil(n / {int(cap)})) AS BIGINT) = 0 ORDER BY i
"""


# -- consumer lag: per client id and topic-partition, from the Fetches' sessions ----------------

# the API keys whose requests tie a client id to a consumer group (OffsetCommit, JoinGroup,
# Heartbeat, LeaveGroup, SyncGroup, ConsumerGroupHeartbeat)
GROUP_MEMBER_APIS = (8, 11, 12, 13, 14, 68)
# a CTE ``g``: each client id's groups (``group_id``), ``i`` = 1 the one its requests name most
# often (on a tie, the first by name)
_GROUP_OF = f"""g AS (
  SELECT client_id, group_id, row_number() OVER (PARTITION BY client_id ORDER BY count(*) DESC, group_id) AS i
  FROM exchanges WHERE api_key IN {GROUP_MEMBER_APIS} AND group_id <> '' GROUP BY client_id, group_id)"""


def consumer_lag_query() -> str:
    """The SQL of stats' consumer lag: per (client id, topic, partition) of the ``lag`` table
    (one figure per partition of a fetch session at each Fetch answer), the figures (how many,
    their sum, the largest and the first time of it, the last (at the latest answer), the
    stable lag's last and largest), whether the client reads committed (an answered Fetch with
    isolation_level 1), and its group: the one its JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
    OffsetCommit or ConsumerGroupHeartbeat requests name most often."""
    return f"""WITH x AS (SELECT client_id, topic, partition, response_time AS t, lag, stable_lag AS stable FROM lag),
a AS (
  SELECT client_id, topic, partition, count(*) AS samples, sum(lag) AS total, max(lag) AS mx, max(t) AS last_time,
         max(CASE WHEN stable IS NOT NULL THEN t END) AS stable_time, max(stable) AS stable_max
  FROM x GROUP BY client_id, topic, partition),
r AS (
  SELECT a.client_id, a.topic, a.partition, samples, total, mx, last_time, stable_max,
         min(x.t) FILTER (WHERE x.lag = a.mx) AS max_time,
         max(x.lag) FILTER (WHERE x.t = a.last_time) AS last,
         max(x.stable) FILTER (WHERE x.t = a.stable_time) AS stable_last
  FROM a JOIN x ON x.client_id IS NOT DISTINCT FROM a.client_id AND x.topic = a.topic AND x.partition = a.partition
  GROUP BY a.client_id, a.topic, a.partition, samples, total, mx, last_time, stable_max),
committed AS (
  SELECT DISTINCT client_id, true AS seen FROM exchanges
  WHERE api_key = 1 AND protocol = 'kafka' AND fetch_session.isolation_level = 1 AND response_time IS NOT NULL),
{_GROUP_OF}
SELECT r.client_id, g.group_id AS "group", r.topic, r.partition, c.seen AS read_committed,
       samples, last, mx AS "max", total, max_time, last_time, stable_last, stable_max
FROM r LEFT JOIN g ON g.client_id IS NOT DISTINCT FROM r.client_id AND g.i = 1
       LEFT JOIN committed c ON c.client_id IS NOT DISTINCT FROM r.client_id
"""


def group_counts_query() -> str:
    """The SQL of each consumer group's exchanges: the group APIs' requests that name it."""
    return f"""SELECT group_id, count(*) AS n FROM exchanges
WHERE api_key IN {GROUP_MEMBER_APIS} AND protocol = 'kafka' AND group_id IS NOT NULL
GROUP BY group_id
"""


def group_counts(query: Query) -> dict[str, int]:
    """Group id -> its exchanges (the group stories' ``exchanges``)."""
    return {g: int(n) for g, n in query(group_counts_query())[1]}


def consumer_lag(query: Query) -> list[dict[str, Any]]:
    """stats' consumer lag: one object per (client id, topic, partition), by client id, topic
    and partition."""
    out = []
    for d in _dicts(query, consumer_lag_query()):
        committed = d["read_committed"] is True
        n = int(d["samples"])
        out.append({
            "client_id": d["client_id"], "group": d["group"], "topic": d["topic"], "partition": d["partition"],
            "isolation": "read_committed" if committed else "read_uncommitted",
            "samples": n, "last": int(d["last"]), "max": int(d["max"]), "mean": round(int(d["total"]) / n, 3),
            "max_time": d["max_time"], "last_time": d["last_time"],
            "stable_last": None if not committed or d["stable_last"] is None else int(d["stable_last"]),
            "stable_max": None if not committed or d["stable_max"] is None else int(d["stable_max"]),
        })
    out.sort(key=lambda r: sort_key((r["client_id"], r["topic"], r["partition"])))
    return out


def lag_points_query(cap: int = 4096) -> str:
    """The SQL of the consumer-lag points stats' plot draws: per (client id, topic, partition),
    its figures in time order, at most ``cap``: of each run of 2^m neighbours (m the
    smallest that keeps ``cap``) the highest, at its own time (the earliest on a tie), so a
    peak stays where it was seen; with the client's group as the lag view names it."""
    return f"""WITH ids AS (
  SELECT client_id, topic, partition, row_number() OVER () AS id
  FROM (SELECT DISTINCT client_id, topic, partition FROM lag) d),
n AS (
  SELECT id, response_time AS t, lag, row_number() OVER (PARTITION BY id ORDER BY response_time, lag) - 1 AS i,
         count(*) OVER (PARTITION BY id) AS n
  FROM lag JOIN ids ON ids.client_id IS NOT DISTINCT FROM lag.client_id AND ids.topic = lag.topic
                       AND ids.partition = lag.partition),
b AS (
  SELECT id, t, lag, row_number() OVER (PARTITION BY id, i // CAST(greatest(1, pow(2, ceil(log2(n / {int(cap)}.0))))
                                                                    AS BIGINT)
                                         ORDER BY lag DESC, t) AS r
  FROM n),
{_GROUP_OF}
SELECT ids.client_id, g.group_id AS "group", ids.topic, ids.partition, t, lag
FROM b JOIN ids ON ids.id = b.id LEFT JOIN g ON g.client_id IS NOT DISTINCT FROM ids.client_id AND g.i = 1
WHERE r = 1 ORDER BY ids.client_id, ids.topic, ids.partition, t
"""


def lag_points(query: Query, cap: int = 4096) -> dict[str, list[tuple[float, int]]]:
    """"group-or-client topic-partition" -> [(epoch seconds, lag)] in time order (the plot's)."""
    out: dict[str, list[tuple[float, int]]] = {}
    for cid, group, topic, partition, t, lag in query(lag_points_query(cap))[1]:
        out.setdefault(f"{group or cid or '-'} {topic}-{partition}", []).append((float(t), int(lag)))
    return out


# -- the producers: one per client id and producer id, from the batches table ------------------

# a Produce's batches the producer stories count: not control batches (transaction markers)
_SENT = "SELECT * FROM batches WHERE NOT control"


def producer_codecs_query() -> str:
    """The SQL of the producers' figures per (client id, producer id, codec): batches,
    records (and the most in a batch), bytes (and of the batches sized before compression:
    how many, their bytes, their bytes before), transactional batches, the transactional id,
    and linger (a batch's max_timestamp - base_timestamp, of those where max >= base >= 0)."""
    linger = "max_timestamp - base_timestamp"
    ok = "max_timestamp >= base_timestamp AND base_timestamp >= 0"
    return f"""SELECT client_id, producer_id, codec, count(*) AS batches, sum(records) AS records,
       max(records) AS max_records, sum(bytes) AS bytes, count(bytes_before) AS sized,
       coalesce(sum(bytes) FILTER (WHERE bytes_before IS NOT NULL), 0) AS sized_bytes,
       coalesce(sum(bytes_before), 0) AS bytes_before,
       count(*) FILTER (WHERE transactional) AS transactional_batches, min(transactional_id) AS transactional_id,
       count(*) FILTER (WHERE {ok}) AS linger_n, coalesce(sum({linger}) FILTER (WHERE {ok}), 0) AS linger_total,
       max({linger}) FILTER (WHERE {ok}) AS linger_max
FROM ({_SENT}) b
GROUP BY client_id, producer_id, codec
"""


def producer_requests_query() -> str:
    """The SQL of each producer's requests by acks (a request counts once per producer id
    its batches carry)."""
    return f"""SELECT client_id, producer_id, acks, count(*) AS requests
FROM (SELECT DISTINCT client_id, producer_id, capture, conn, request_frame, correlation_id, acks FROM ({_SENT}) b) r
GROUP BY client_id, producer_id, acks
"""


def producer_epochs_query() -> str:
    """The SQL of the epochs and retries of each idempotent producer: a retry is a batch sent
    again with the same epoch, topic-partition and base_sequence."""
    return f"""SELECT client_id, producer_id, producer_epoch, sum(greatest(n - 1, 0)) AS retries
FROM (SELECT client_id, producer_id, producer_epoch, topic, partition, base_sequence,
             count(*) FILTER (WHERE base_sequence >= 0) AS n
      FROM ({_SENT}) b WHERE producer_id >= 0
      GROUP BY client_id, producer_id, producer_epoch, topic, partition, base_sequence) s
GROUP BY client_id, producer_id, producer_epoch
"""


ACKS = {-1: "all", 0: "0", 1: "1"}


def producers(query: Query) -> list[dict[str, Any]]:
    """stats' producers: one object per (client id, producer id), by client id and producer id:
    requests by acks, batches, records, bytes per batch before and after compression and the
    ratio per codec, linger, transactions, the epochs and retries of an idempotent producer."""
    per: dict[tuple[Any, Any], dict[str, Any]] = {}

    def of(cid: Any, pid: Any) -> dict[str, Any]:
        return per.setdefault((cid, int(pid)), {"codecs": {}, "acks": {}, "requests": 0, "epochs": set(),
                                                "retries": 0})

    for r in _dicts(query, producer_codecs_query()):
        of(r["client_id"], r["producer_id"])["codecs"][r["codec"]] = r
    for cid, pid, acks, n in query(producer_requests_query())[1]:
        p = of(cid, pid)
        p["requests"] += int(n)
        if acks is not None:
            name = ACKS.get(int(acks), str(acks))
            p["acks"][name] = p["acks"].get(name, 0) + int(n)
    for cid, pid, epoch, retries in query(producer_epochs_query())[1]:
        p = of(cid, pid)
        p["epochs"].add(int(epoch))
        p["retries"] += int(retries or 0)
    out = []
    for (cid, pid), p in sorted(per.items(), key=lambda kv: (kv[0][0] is None, kv[0][0] or "", kv[0][1])):
        rows = p["codecs"].values()
        batches = sum(int(r["batches"]) for r in rows)
        records = sum(int(r["records"]) for r in rows)
        nbytes = sum(int(r["bytes"]) for r in rows)
        sized = sum(int(r["sized"]) for r in rows)
        before = sum(int(r["bytes_before"]) for r in rows)
        linger_n = sum(int(r["linger_n"]) for r in rows)
        lingers = [int(r["linger_max"]) for r in rows if r["linger_max"] is not None]
        txn_ids = [r["transactional_id"] for r in rows if r["transactional_id"] is not None]
        comp = {}
        for c in sorted(p["codecs"]):
            r = p["codecs"][c]
            nb, kb, ku = int(r["batches"]), int(r["sized_bytes"]), int(r["bytes_before"])
            comp[c] = {"batches": nb, "bytes": int(r["bytes"]), "bytes_before": ku if int(r["sized"]) == nb else None,
                       "ratio": round(ku / kb, 3) if kb else None}
        out.append({
            "client_id": cid, "producer_id": pid, "idempotent": pid >= 0,
            "producer_epochs": sorted(p["epochs"]),
            "transactional_id": min(txn_ids) if txn_ids else None,
            "transactional_batches": sum(int(r["transactional_batches"]) for r in rows),
            "acks": dict(sorted(p["acks"].items())), "requests": p["requests"],
            "batches": batches, "records": records,
            "records_per_batch": round(records / batches, 3),
            "max_records_per_batch": max(int(r["max_records"]) for r in rows),
            "bytes_per_batch": round(nbytes / batches, 1),
            "bytes_before_per_batch": round(before / sized, 1) if sized == batches else None,
            "compression": comp,
            "linger_ms": {"mean": round(sum(int(r["linger_total"]) for r in rows) / linger_n, 3) if linger_n else None,
                          "max": max(lingers) if lingers else None},
            "retries": p["retries"] if pid >= 0 else None,
        })
    return out


# -- the report: what stats prints, from the queries ---------------------------------------------

# a query run by an engine: the SQL (DuckDB's) -> (column names, rows)
Query = Callable[[str], tuple[list[str], list[tuple[Any, ...]]]]

_SUMMARY = ("min", *(name for name, _p in PERCENTILES), "max", "mean")
_COUNTS = ("count", "answered", "unanswered", "orphans", "no_response", "malformed")
_SIZES = ("service", "bytes_in", "bytes_out", "throttled")
PERCENTILE_DEFINITION = "nearest-rank: pX = value at 1-based rank ceil(X/100 * n), exact"


def _named_counts(text: str | None) -> dict[str, int]:
    """``NAME=n;NAME=n`` (``_joined``) -> {NAME: n}."""
    out: dict[str, int] = {}
    for item in (text or "").split(";"):
        if item:
            name, _, n = item.rpartition("=")
            out[name] = int(n)
    return out


def _ms(v: Any) -> float | None:
    return None if v is None else round(float(v), 3)


def sort_key(key: Sequence[Any]) -> tuple[Any, ...]:
    """The order of groups and topic-partitions: nulls last, numbers before text."""
    return tuple((x is None, isinstance(x, str), x if x is not None else 0) for x in key)


def groups(query: Query, by: Sequence[str], labels: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """stats' groups for ``by``: a dict per group, its keys then its figures (nested:
    ``latency_ms``: {min, p50.., max, mean}...), in key order. ``labels``: several captures'
    names (path -> label): connections are keyed ``label#n``."""
    cols, rows = query(groups_query(by))
    out = []
    for row in rows:
        d = dict(zip(cols, row, strict=True))
        g: dict[str, Any] = {b: d[b] for b in by}
        if "conn" in by and labels is not None:
            g["conn"] = f"{labels[d['capture']]}#{d['conn']}"
        g.update({c: int(d[c]) for c in _COUNTS})
        g["errors"] = _named_counts(d["errors"])
        g["error_exchanges"] = int(d["error_exchanges"])
        for name in ("latency_ms", "ttfb_ms", "latency_ms_excl_waits"):
            g[name] = {s: _ms(d[f"{name}_{s}"]) for s in _SUMMARY}
        g["waits"] = _named_counts(d["waits"])
        g.update({c: int(d[c]) for c in _SIZES})
        g["throttle_time_ms"] = {"total": int(d["throttle_time_ms_total"]), "max": int(d["throttle_time_ms_max"])}
        g["records"] = int(d["records"])
        g["record_bytes"] = int(d["record_bytes"])
        out.append(g)
    out.sort(key=lambda g: sort_key([g[b] for b in by]))
    return out


_TOP = ("api", "version", "correlation_id", "conn", "client", "broker", "client_id", "request_frame",
        "response_frame", "request_time", "latency_ms", "ttfb_ms", "wait", "status", "error_codes")


def top(query: Query, n: int, labels: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """stats' ``n`` slowest exchanges, slowest first (with ``labels``: each names its capture)."""
    if n <= 0:
        return []
    cols, rows = query(top_query(n))
    out = []
    for row in rows:
        d = dict(zip(cols, row, strict=True))
        rec = {k: d[k] for k in _TOP}
        rec["latency_ms"], rec["ttfb_ms"] = _ms(d["latency_ms"]), _ms(d["ttfb_ms"])
        rec["error_codes"] = list(d["error_codes"] or ())
        if labels is not None:
            rec["capture"] = labels[d["capture"]]
        out.append(rec)
    return out


def _dicts(query: Query, sql: str) -> list[dict[str, Any]]:
    cols, rows = query(sql)
    return [dict(zip(cols, row, strict=True)) for row in rows]


def throughput(query: Query) -> dict[str, Any]:
    """stats' throughput: the span, exchanges and requests per second, per topic-partition,
    per second."""
    (span,) = _dicts(query, throughput_query())
    tps = _dicts(query, topic_partitions_query())
    tps.sort(key=lambda r: sort_key((r["topic"], r["partition"])))
    for r in tps:
        for c in ("produced_records", "produced_bytes", "fetched_records", "fetched_bytes"):
            r[c] = int(r[c])
    per_second = _dicts(query, per_second_query())
    for r in per_second:
        for c, v in r.items():
            r[c] = int(v)
    return {"first_time": span["first_time"], "last_time": span["last_time"],
            "duration_s": float(span["duration_s"] or 0.0), "exchanges": int(span["exchanges"]),
            "requests_per_s": span["requests_per_s"], "topic_partitions": tps, "per_second": per_second}


def bucket_lower(i: int) -> float:
    """The lower edge (ms) of bucket ``i`` of the latency histograms (histogram_query)."""
    d, sub = divmod(i, 3)
    return (1.0, 2.0, 5.0)[sub] * 10.0 ** d


def histograms(query: Query) -> dict[str, list[tuple[float, int]]]:
    """API -> [(bucket lower edge ms, exchanges)] from its lowest bucket to its highest,
    the empty ones between as zeros."""
    per: dict[str, dict[int, int]] = {}
    for api, bucket, _lower, n in query(histogram_query())[1]:
        per.setdefault(api, {})[int(bucket)] = int(n)
    return {api: [(bucket_lower(i), h.get(i, 0)) for i in range(min(h), max(h) + 1)]
            for api, h in sorted(per.items())}


def latency_series(query: Query) -> dict[str, list[tuple[int, int, float, float]]]:
    """API -> [(second, exchanges, mean latency ms, max ms)]: latency over time."""
    out: dict[str, list[tuple[int, int, float, float]]] = {}
    for api, t, n, mean, mx in query(latency_series_query())[1]:
        out.setdefault(api, []).append((int(t), int(n), float(mean), float(mx)))
    return out


def points(query: Query, cap: int = 50_000) -> dict[str, list[tuple[float, float]]]:
    """API -> [(request time, latency ms)]: at most ``cap`` points, evenly through time."""
    out: dict[str, list[tuple[float, float]]] = {}
    for api, t, lat in query(points_query(cap))[1]:
        out.setdefault(api, []).append((t, lat))
    return out


def report(query: Query, by: Sequence[str], top_n: int = 0,
           labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """stats' figures but the stories (``analyzer.sinks.insights``), as ``stats -f json``
    gives them: ``by``, ``groups``, ``top``, ``throughput``, ``consumer_lag``, ``producers``,
    ``accuracy``."""
    return {"by": list(by), "groups": groups(query, by, labels), "top": top(query, top_n, labels),
            "throughput": throughput(query), "consumer_lag": consumer_lag(query), "producers": producers(query),
            "accuracy": {"percentile_definition": PERCENTILE_DEFINITION}}
