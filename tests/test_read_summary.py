"""`read`'s summary lines are made from the core's lean trees (``Options.decode="lite-topics"``:
request topics kept; full trees for the APIs whose bytes fields carry payloads the full
decoder reads further, and for frames cut by the capture). They must say what full trees
say: the same lines and the same closing summary, on every capture and on damaged
exchanges."""
from __future__ import annotations

from pathlib import Path

from analyzer.commands.options import summary_text
from analyzer.pipeline import Options, Run
from analyzer.sinks.output import summary_line
from dissectors import kafka
from dissectors.context import DecodeContext, Limits
from dissectors.kafka import NESTED_PAYLOAD_APIS
from tests.conftest import SAMPLES, SHARED_CAPTURES, capture_paths
from tests.lean import damaged_capture, figures, lean_request
from tests.pcapgen import TcpFlow, write_pcap


def summary_output(path: Path, decode: str, **limits: int) -> list[str]:
    """What `read` prints: a line per exchange, then the closing summary (``limits``: the
    DecodeContext's)."""
    run = Run(str(path), Options(decode=decode), DecodeContext(Limits(**limits)))
    lines: list[str] = []
    t0 = None
    for ex in run:
        if t0 is None:
            t0 = run.summary.first_ts
        lines.append(summary_line(ex, t0))
    return lines + summary_text(run.summary, run.ctx)


def test_the_lean_mode_reads_every_capture_as_full_trees_do() -> None:
    n = 0
    for path in capture_paths():
        got = summary_output(path, "lite-topics")
        assert got == summary_output(path, "full"), path.name
        n += len(got)
    assert n > (1000 if SHARED_CAPTURES.is_dir() else 300)      # (the samples alone: 362 lines)


def test_the_lean_mode_reads_as_full_trees_do_under_tight_limits() -> None:
    """Arrays over --max-array-len and records over --max-decompressed: cut and counted
    alike (the samples)."""
    n = 0
    for path in sorted(SAMPLES.glob("*.pcap*")):
        for limits in ({"max_array_len": 3}, {"max_decompressed": 300}):
            got = summary_output(path, "lite-topics", **limits)
            assert got == summary_output(path, "full", **limits), (path.name, limits)
            n += any(line.startswith("limits hit:") for line in got)
    assert n > 10


def test_the_lean_mode_reads_damaged_exchanges_as_full_trees_do(tmp_path: Path) -> None:
    """Every answered exchange of the samples, its request body and its response after the
    correlation id damaged (twice each), one connection each: the same lines (statuses,
    error codes, partitions, records, CRC verdicts) and the same closing counts."""
    cap, apis = damaged_capture(tmp_path / "damaged.pcap")
    got = summary_output(cap, "lite-topics")
    assert got == summary_output(cap, "full")
    malformed = sum("[malformed]" in line for line in got)
    assert len(got) > 500 and malformed > 300, (len(got), malformed)
    # the APIs whose payloads only full trees judge are among them
    assert apis & NESTED_PAYLOAD_APIS


def test_the_lean_mode_leaves_bad_consumer_payloads_to_full_trees(tmp_path: Path) -> None:
    """A JoinGroup whose consumer-protocol metadata is bad: the full decoder marks it; the lean
    walk judges the payload as it does and leaves the message to full trees. A good payload,
    or a bad one of another protocol type (which the full decoder only tries), stays lean."""
    from tests.pcapgen import kafka_request, kafka_response

    # JoinGroup v5 request: group, session and rebalance timeouts, member, instance id (null),
    # protocol type, one protocol "range" with its metadata
    def s(text: str) -> bytes:
        return len(text).to_bytes(2, "big") + text.encode()

    def join(ptype: str, metadata: bytes) -> bytes:
        body = (s("g") + (10000).to_bytes(4, "big") + (30000).to_bytes(4, "big") + s("") + b"\xff\xff"
                + s(ptype) + (1).to_bytes(4, "big") + s("range") + len(metadata).to_bytes(4, "big") + metadata)
        return kafka_request(11, 5, 1, "c", body)

    bad = b"\x00\x07\x01"                                  # version 7, then one byte of a topics count
    good = b"\x00\x00" + (1).to_bytes(4, "big") + s("t") + b"\xff\xff\xff\xff"   # v0: topic "t", null user data
    req = join("consumer", bad)
    # its answer: throttle, error MEMBER_ID_REQUIRED (79), generation -1, protocol name null...
    resp = kafka_response(1, (0).to_bytes(4, "big") + (79).to_bytes(2, "big") + (-1).to_bytes(4, "big", signed=True)
                          + b"\xff\xff" + s("") + s("m-1") + (0).to_bytes(4, "big"))
    flow = TcpFlow(("10.2.0.1", 30000), ("10.2.0.2", 9092))
    packets = flow.handshake() + flow.send(0, req) + flow.send(1, resp) + flow.fin(0) + flow.fin(1)
    cap = tmp_path / "join.pcap"
    write_pcap(str(cap), packets)
    full = summary_output(cap, "full")
    assert full == summary_output(cap, "lite-topics")
    assert "[malformed]" in full[0] and any(line.startswith("malformed fields: 1") for line in full), full
    header = 2 + 2 + 4 + 2 + 1          # (its header: key, version, id, "c")
    ctx = DecodeContext()
    assert figures(ctx).request(req[4:], header) is None         # the full decoder's
    assert lean_request(req[4:], header, ctx).any_malformed() and ctx.counts.malformed == 1
    for ptype, metadata in (("consumer", good), ("other", bad), ("other", good)):
        frame = join(ptype, metadata)[4:]
        got = figures(ctx).request(frame, header)
        assert got is not None and got[1][0] == 0, (ptype, metadata)
        full_ctx = DecodeContext()
        assert not kafka.decode_request(frame, full_ctx).any_malformed() and full_ctx.counts.malformed == 0


# filters of each kind: on the exchange's fields, on shorthands and on tree paths (which
# decode full trees for the exchanges that reach them), negated
FILTERS = ("api_name == Fetch && latency_ms > 0", "topic matches \"^[a-z]\"", "error || client_id contains a",
           "response.responses.partitions.high_watermark > 0", "!(group contains x) && api_key in {0..20}",
           "producer_id >= 0")


def test_filtered_lines_from_lean_trees_are_those_of_full_trees() -> None:
    """`read -Y` reads lean trees too: the display filter decodes full trees for the
    exchanges that reach a test of a tree field, so it keeps the exchanges it keeps on full
    trees, and the lines are the same."""
    from analyzer.display_filter import compile_filter

    def lines(path: Path, decode: str, expr: str) -> list[str]:
        run = Run(str(path), Options(decode=decode), DecodeContext())
        keep = compile_filter(expr).matcher(run.ctx)
        out = [summary_line(ex, run.summary.first_ts) for ex in run if keep(ex)]
        return out + summary_text(run.summary, run.ctx)

    kept = 0
    for path in sorted(SAMPLES.glob("*.pcap*")):
        for expr in FILTERS:
            got = lines(path, "lite-topics", expr)
            assert got == lines(path, "full", expr), (path.name, expr)
            kept += len(got)
    assert kept > 1000, kept
