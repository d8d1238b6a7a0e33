"""stats' figures where the old accumulator had fast paths, against the plain definitions:
per-second rows and latency over time with exchanges out of time order and unanswered ones,
group keys read from the exchange and its connection, the throttle time read from the body."""
from __future__ import annotations

from analyzer import engine, figures
from tests.conftest import figures_db, stats_of
from tests.test_stats import T0, mk


def test_per_second_rows_with_exchanges_out_of_time_order() -> None:
    parts = [{"topic": "t", "partition": 0, "records": 3, "bytes": 100, "error": None}]
    order = [0.1, 1.2, 0.3, 2.5, 1.7, 0.9]        # back and forth between seconds
    exs = [mk(api="Fetch" if i % 2 else "Produce", version=9, lat=2.0 + i, t=t, cid=i, frame=3 * i + 1,
              partitions=parts) for i, t in enumerate(order)]
    exs.append(mk(api="Metadata", lat=None, t=1.5, cid=99, frame=400))      # unanswered: no latency
    sec0 = int(T0)
    rows = {r["t"] - sec0: r for r in stats_of(exs)["throughput"]["per_second"]}
    assert sorted(rows) == [0, 1, 2]
    assert [rows[s]["requests"] for s in (0, 1, 2)] == [3, 3, 1]
    # Produce at 0.1, 0.3, 1.7; Fetch at 1.2, 2.5, 0.9
    assert [rows[s]["produced_records"] for s in (0, 1, 2)] == [6, 3, 0]
    assert [rows[s]["fetched_bytes"] for s in (0, 1, 2)] == [100, 100, 100]
    series = figures.latency_series(engine.query_of(figures_db(exs)))
    assert [(s - sec0, n) for s, n, _mean, _mx in series["Produce"]] == [(0, 2), (1, 1)]
    assert [round(mx, 3) for _s, _n, _mean, mx in series["Fetch"]] == [7.0, 3.0, 5.0]
    assert "Metadata" not in series


def test_group_keys_picked_from_exchange_and_connection() -> None:
    exs = [mk(api=api, version=v, lat=1.0 + i, conn=i % 3, client_id=f"c{i % 2}", cid=i, frame=3 * i + 1)
           for i, (api, v) in enumerate([("Produce", 9), ("Fetch", 12), ("Produce", 9), ("Metadata", 1)] * 3)]
    for by in (("client_id",), ("conn",), ("broker", "version"), ("client", "api"), ("version", "api")):
        res = stats_of(exs, by=by)
        want: dict[tuple[object, ...], int] = {}
        for ex in exs:
            c = ex.conn
            vals = {"api": ex.api_name, "version": ex.api_version, "client_id": ex.client_id,
                    "client": str(c.client), "broker": str(c.broker), "conn": c.id}
            k = tuple(vals[b] for b in by)
            want[k] = want.get(k, 0) + 1
        assert {tuple(g[b] for b in by): g["count"] for g in res["groups"]} == want, by


def test_pending_seconds_with_an_unanswered_exchange_opening_a_second() -> None:
    # the unanswered exchange is alone at the start of second 1: it counts as a request
    # there, never as a latency
    exs = [mk(api="Metadata", lat=1.5, t=0.2, cid=1, frame=1), mk(api="Metadata", lat=None, t=1.1, cid=2, frame=10),
           mk(api="Metadata", lat=2.5, t=1.4, cid=3, frame=20), mk(api="Metadata", lat=4.0, t=2.1, cid=4, frame=30)]
    res = stats_of(exs, by=("api",))
    sec0 = int(T0)
    assert [(r["t"] - sec0, r["requests"]) for r in res["throughput"]["per_second"]] == [(0, 1), (1, 2), (2, 1)]
    q = engine.query_of(figures_db(exs))
    assert [(s - sec0, n, round(mx, 3)) for s, n, _m, mx in figures.latency_series(q)["Metadata"]] == \
        [(0, 1, 1.5), (1, 1, 2.5), (2, 1, 4.0)]
    assert sum(n for _b, n in figures.histograms(q)["Metadata"]) == 3
    g = res["groups"][0]
    assert (g["count"], g["answered"], g["unanswered"]) == (4, 3, 1)


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
    assert stats_of([ex])["groups"][0]["throttle_time_ms"] == {"total": 40, "max": 40}
    for bad in (True, -5, "7", None):       # not an int > 0 (a bool is not an int here)
        root.children[1].children[1].value = bad
        assert throttle_ms(ex) == 0
