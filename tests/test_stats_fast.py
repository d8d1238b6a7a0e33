"""The fast paths of StatsAccumulator.add: latencies pending in their group and handed to
its Quantiles in batches, per-second rows kept at hand, group keys picked in C; each
against the figures of the plain definitions."""
from __future__ import annotations

import json

from analyzer.sinks.stats import StatsAccumulator
from tests.test_stats import T0, mk


def test_groups_settle_their_pending_latencies_in_batches() -> None:
    exs = [mk(api="Metadata", version=12, lat=0.25 + (i % 37) * 0.125, t=i * 0.001, cid=i, frame=3 * i + 1)
           for i in range(2500)]
    acc = StatsAccumulator(("api",))
    for ex in exs:
        acc.add(ex)
    g = acc.groups[("Metadata",)]
    assert len(g.latency_pending) < 1024 and len(g.ttfb_pending) <= len(g.latency_pending)
    res = acc.result()["groups"][0]
    assert res["answered"] == 2500 and res["service"] == 2500 and not res["exact"]
    lats = [0.25 + (i % 37) * 0.125 for i in range(2500)]
    assert res["latency_ms"]["min"] == 0.25 and res["latency_ms"]["max"] == max(lats)
    assert res["latency_ms"]["mean"] == round(sum(round(v * 1e6) for v in lats) / 2500 / 1e6, 3)


def test_per_second_rows_with_exchanges_out_of_time_order() -> None:
    parts = [{"topic": "t", "partition": 0, "records": 3, "bytes": 100, "error": None}]
    order = [0.1, 1.2, 0.3, 2.5, 1.7, 0.9]        # back and forth between seconds
    exs = [mk(api="Fetch" if i % 2 else "Produce", version=9, lat=2.0 + i, t=t, cid=i, frame=3 * i + 1,
              partitions=parts) for i, t in enumerate(order)]
    exs.append(mk(api="Metadata", lat=None, t=1.5, cid=99, frame=400))      # unanswered: no latency
    acc = StatsAccumulator(("api", "version"))
    for ex in exs:
        acc.add(ex)
    sec0 = int(T0)
    rows = {r["t"] - sec0: r for r in acc.throughput()["per_second"]}
    assert sorted(rows) == [0, 1, 2]
    assert [rows[s]["requests"] for s in (0, 1, 2)] == [3, 3, 1]
    # Produce at 0.1, 0.3, 1.7; Fetch at 1.2, 2.5, 0.9
    assert [rows[s]["produced_records"] for s in (0, 1, 2)] == [6, 3, 0]
    assert [rows[s]["fetched_bytes"] for s in (0, 1, 2)] == [100, 100, 100]
    series = acc.latency_series()
    assert [(s - sec0, n) for s, n, _mean, _mx in series["Produce"]] == [(0, 2), (1, 1)]
    assert [round(mx, 3) for _s, _n, _mean, mx in series["Fetch"]] == [7.0, 3.0, 5.0]
    # the state (as shipped by workers and the Spark job) and merging keep every figure
    back = StatsAccumulator.from_state(json.loads(json.dumps(acc.to_state())))
    assert back.result(top=3) == acc.result(top=3)
    assert back.histograms() == acc.histograms() and back.latency_series() == series
    half = StatsAccumulator(("api", "version"))
    for ex in exs[:3]:
        half.add(ex)
    rest = StatsAccumulator(("api", "version"))
    for ex in exs[3:]:
        rest.add(ex)
    half.merge(rest)
    for ex in exs[:2]:                 # add() after a merge writes into the merged rows
        half.add(ex)
        acc.add(ex)
    # (but in_flight, which follows a connection whole: one is never dealt out to several)
    assert {k: v for k, v in half.result(top=3).items() if k != "in_flight"} == \
        {k: v for k, v in acc.result(top=3).items() if k != "in_flight"}
    assert half.latency_series() == acc.latency_series() and half.histograms() == acc.histograms()


def test_group_keys_picked_from_exchange_and_connection() -> None:
    exs = [mk(api=api, version=v, lat=1.0 + i, conn=i % 3, client_id=f"c{i % 2}", cid=i, frame=3 * i + 1)
           for i, (api, v) in enumerate([("Produce", 9), ("Fetch", 12), ("Produce", 9), ("Metadata", 1)] * 3)]
    for by in (("client_id",), ("conn",), ("broker", "version"), ("client", "api"), ("version", "api")):
        acc = StatsAccumulator(by)
        for ex in exs:
            acc.add(ex)
        want: dict[tuple[object, ...], int] = {}
        for ex in exs:
            c = ex.conn
            vals = {"api": ex.api_name, "version": ex.api_version, "client_id": ex.client_id,
                    "client": str(c.client), "broker": str(c.broker), "conn": c.id}
            k = tuple(vals[b] for b in by)
            want[k] = want.get(k, 0) + 1
        assert {k: g.count for k, g in acc.groups.items()} == want, by


def test_pending_seconds_with_an_unanswered_exchange_opening_a_second() -> None:
    # the unanswered exchange starts second 1 (the pending latencies of second 0 are counted
    # then) and is itself pending there: it counts as a request, never as a latency
    exs = [mk(api="Metadata", lat=1.5, t=0.2, cid=1, frame=1), mk(api="Metadata", lat=None, t=1.1, cid=2, frame=10),
           mk(api="Metadata", lat=2.5, t=1.4, cid=3, frame=20), mk(api="Metadata", lat=4.0, t=2.1, cid=4, frame=30)]
    acc = StatsAccumulator(("api",), keep_top=0)
    for ex in exs:
        acc.add(ex)
    sec0 = int(T0)
    assert [(r["t"] - sec0, r["requests"]) for r in acc.throughput()["per_second"]] == [(0, 1), (1, 2), (2, 1)]
    assert [(s - sec0, n, round(mx, 3)) for s, n, _m, mx in acc.latency_series()["Metadata"]] == \
        [(0, 1, 1.5), (1, 1, 2.5), (2, 1, 4.0)]
    assert sum(n for _b, n in acc.histograms()["Metadata"]) == 3
    g = acc.result()["groups"][0]
    assert (g["count"], g["answered"], g["unanswered"]) == (4, 3, 1)
    assert acc.top(5) == []          # keep_top 0: no exchange enters the top


def test_throttle_read_from_the_body_whatever_comes_before_it() -> None:
    from analyzer.sinks.stats import throttle_ms
    from dissectors.field import Field
    ex = mk(api="Metadata", lat=3.0, resp_body={"throttle_time_ms": 250})
    assert throttle_ms(ex) == 250
    root = Field("response", "Response", children=[Field("header", "ResponseHeader", children=[
        Field("throttle_time_ms", "int32", 9)]), Field("body", "MetadataResponse", children=[
            Field("topics", "array", 0, children=[]), Field("throttle_time_ms", "int32", 40)])])
    assert root.get_in("body", "throttle_time_ms") == 40 and root.get_in("body", "nope", -1) == -1
    assert root.get_in("missing", "throttle_time_ms") is None
    ex.response_tree = root
    assert throttle_ms(ex) == 40
    for bad in (True, -5, "7", None):       # not an int > 0 (a bool is not an int here)
        root.children[1].children[1].value = bad
        assert throttle_ms(ex) == 0
