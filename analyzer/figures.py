"""The figures of ``stats`` as queries over the tables (``analyzer.tables``).

``groups_query(by)`` is the SQL of ``stats``' groups (``top_query(n)``, of its N slowest exchanges;
``throughput_query``, ``topic_partitions_query`` and ``per_second_query``, of its throughput;
``views``, all of them as the views ``sql`` defines): one row per group of the ``--by`` keys,
with the columns of ``stats -f csv`` (counts by status, errors and waits as ``NAME=n;...``,
the latency, time-to-first-byte and service-time percentiles and means, bytes, throttling,
records), computed from the ``exchanges`` table alone: what ``stats --query`` prints for
``sql`` to run (DuckDB's SQL). Percentiles are nearest-rank, as ``stats`` defines them, and
exact at any count (``stats`` keeps exact values up to 1,000 per group, then a DDSketch
within 1 %); means are of the latencies in nanoseconds, as ``stats`` sums them.
``spark_sql`` makes Spark SQL of the same definition (sqlglot), for the Spark job's tables.
``tests/test_figures.py`` holds the query equal to ``stats`` on every capture of the corpus,
and its Spark SQL equal to it on Spark.

Grouping by ``topic`` or ``partition`` counts an exchange once under each topic-partition it
names (``topic_partitions``; none: under null), with that key's share of its partitions'
records, bytes and errors, as ``stats`` does; ``conn`` groups by capture and connection (its
numbers restart per capture).
"""
from __future__ import annotations

from collections.abc import Sequence

# stats' group keys (--by), each with the exchanges table's column behind it (topic and
# partition: those of the topic-partitions an exchange names, below)
KEY_COLUMNS = {"api": "api_name", "version": "api_version", "client_id": "client_id",
               "client": "client", "broker": "broker", "topic": "topic", "partition": "partition",
               "conn": "conn"}

# the percentiles stats reports (name, fraction), nearest-rank
PERCENTILES: tuple[tuple[str, float], ...] = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p999", 0.999))


def _summary(name: str, values: str, total_ns: str) -> str:
    """min, p50 .. p999, max, mean of the sorted list ``values`` (ms), as columns ``name_min``..."""
    n = f"array_length({values})"
    cols = [f"{values}[1] AS {name}_min"]
    cols += [f"{values}[CAST(greatest(1, ceil({p} * {n})) AS BIGINT)] AS {name}_{label}" for label, p in PERCENTILES]
    cols += [f"{values}[{n}] AS {name}_max",
             f"CASE WHEN {n} > 0 THEN round({total_ns} / {n} / 1e6, 3) END AS {name}_mean"]
    return ",\n       ".join(cols)


def _joined(values: str) -> str:
    """``NAME=n;NAME=n`` (names sorted) of the list ``values``, empty when none."""
    return (f"coalesce(array_to_string(list_transform(list_sort(list_distinct({values})), "
            f"lambda e: e || '=' || CAST(array_length(list_filter({values}, lambda x: x = e)) AS VARCHAR)), ';'), '')")


def groups_query(by: Sequence[str]) -> str:
    """The SQL of stats' groups for the ``--by`` keys ``by`` (of ``KEY_COLUMNS``)."""
    bad = [b for b in by if b not in KEY_COLUMNS]
    if bad or not by:
        raise ValueError(f"no such group key: {', '.join(bad) or '(none)'}")
    expand = bool({"topic", "partition"} & set(by))
    keys = (["capture"] if "conn" in by else []) + [f"{KEY_COLUMNS[b]} AS {b}" for b in by]
    names = (["capture"] if "conn" in by else []) + list(by)
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
                                               ELSE topic_partitions END) AS t FROM x)) k USING (ex))"""
        errs = ("CASE WHEN pds IS NULL THEN error_codes "
                "ELSE list_filter(list_transform(pds, lambda p: p.error), lambda e: e IS NOT NULL) END")
        parts = "coalesce(pds, [])"
    else:
        source, errs, parts = "x", "error_codes", "partitions"
    # (the topic expansion joins each exchange to its keys by a number of its own)
    number = ("row_number() OVER (ORDER BY capture, conn, request_frame, response_frame, correlation_id) AS ex, "
              if expand else "")
    return f"""WITH x AS (
  SELECT {number}*,
         round_even((response_time - request_time) * 1000.0 * 1e6, 0) AS lat_ns,
         round_even((response_first_time - request_time) * 1000.0 * 1e6, 0) AS ttfb_ns
  FROM exchanges),
g AS (
  SELECT {', '.join(keys)},
         count(*) AS count,
         count(latency_ms) AS answered,
         count(*) FILTER (WHERE status = 'unanswered') AS unanswered,
         count(*) FILTER (WHERE status = 'orphan_response') AS orphans,
         count(*) FILTER (WHERE status = 'no_response_expected') AS no_response,
         count(*) FILTER (WHERE status = 'malformed') AS malformed,
         flatten(list({errs})) AS error_list,
         count(*) FILTER (WHERE array_length({errs}) > 0) AS error_exchanges,
         list_sort(list(latency_ms) FILTER (WHERE latency_ms IS NOT NULL)) AS lat,
         list_sort(list(ttfb_ms) FILTER (WHERE latency_ms IS NOT NULL)) AS ttfb,
         list_sort(list(latency_ms) FILTER (WHERE latency_ms IS NOT NULL AND wait IS NULL)) AS svc,
         sum(lat_ns) AS lat_ns, sum(ttfb_ns) AS ttfb_ns, sum(lat_ns) FILTER (WHERE wait IS NULL) AS svc_ns,
         list(wait) FILTER (WHERE wait IS NOT NULL AND latency_ms IS NOT NULL) AS wait_list,
         coalesce(sum(request_bytes), 0) AS bytes_in,
         coalesce(sum(response_bytes), 0) AS bytes_out,
         count(*) FILTER (WHERE throttle_ms > 0) AS throttled,
         sum(throttle_ms) AS throttle_time_ms_total,
         max(throttle_ms) AS throttle_time_ms_max,
         coalesce(sum(list_sum(list_transform({parts}, lambda p: p.records))), 0) AS records,
         coalesce(sum(list_sum(list_transform({parts}, lambda p: p.bytes))), 0) AS record_bytes
  FROM {source}
  GROUP BY ALL)
SELECT {', '.join(names)}, count, answered, unanswered, orphans, no_response, malformed,
       {_joined('error_list')} AS errors,
       error_exchanges,
       {_summary('latency_ms', 'lat', 'lat_ns')},
       {_summary('ttfb_ms', 'ttfb', 'ttfb_ns')},
       {_summary('latency_ms_excl_waits', 'svc', 'svc_ns')},
       {_joined('coalesce(wait_list, [])')} AS waits,
       coalesce(array_length(svc), 0) AS service, bytes_in, bytes_out, throttled, throttle_time_ms_total, throttle_time_ms_max,
       records, record_bytes
FROM g
ORDER BY {', '.join(f'{n} NULLS LAST' for n in names)}
"""


def top_query(n: int) -> str:
    """The SQL of stats' N slowest exchanges (``--top N``): the answered exchanges by latency,
    slowest first (ties: by connection, request frame, correlation id), with the fields of
    stats' ``top`` records, and the capture."""
    return f"""SELECT api_name AS api, api_version AS version, correlation_id, conn, client, broker, client_id,
       request_frame, response_frame, request_time, latency_ms, ttfb_ms, wait, status, error_codes, capture
FROM exchanges
WHERE latency_ms IS NOT NULL
ORDER BY latency_ms DESC, coalesce(conn, -1), coalesce(request_frame, 0), coalesce(correlation_id, -1)
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
