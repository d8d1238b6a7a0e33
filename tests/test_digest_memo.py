"""The digest's memo: a body seen before in the run takes the root made for it then.

A memo hit must give what a decode of those bytes gives (the same tree, the same counters)
and must not be taken where a decode could differ: another offset, another API or version,
bad bytes, a limit hit. Topic ids a Metadata answer teaches are learnt on every hit.
"""
from __future__ import annotations

import pickle
import struct

import pytest

from dissectors import digest, kafka
from dissectors.context import DecodeContext
from tests.test_digest_gen import capture_calls, counters, dump
from tests.test_digest_shape import heartbeat_v4, metadata_v12_response


def decode(c: tuple, ctx: DecodeContext):
    if c[0] == "q":
        return digest.digest_request(c[1], c[2], ctx)
    return digest.digest_response(c[1], c[2], c[3], ctx)


@pytest.mark.parametrize("decode_records", [False, True])
def test_every_capture_body_with_memo_as_without(decode_records: bool) -> None:
    calls = capture_calls()
    shared = DecodeContext(decode_records=decode_records)
    sums = [0, 0, 0, 0]
    hits = 0
    seen: set[int] = set()
    for c in calls:
        fresh = DecodeContext(decode_records=decode_records)
        alone = decode(c, fresh)
        tree = decode(c, shared)
        hits += id(tree) in seen
        seen.add(id(tree))
        assert dump(tree) == dump(alone), f"memo and decode differ on {c[0]} {c[2:]} {c[1].hex()}"
        assert kafka.error_codes(tree) == kafka.error_codes(alone)
        for i, v in enumerate(counters(fresh)[:4]):
            sums[i] += v
        # the run's counters are those of every body decoded on its own, added up
        assert list(counters(shared)[:4]) == sums
    assert hits > len(calls) // 5      # the real captures repeat themselves


def produce_with_records() -> tuple:
    for c in capture_calls():
        if c[0] == "q" and c[1][:2] == b"\x00\x00":
            ctx = DecodeContext(decode_records=False)
            digest.digest_request(c[1], c[2], ctx)
            if ctx.crc_valid:
                return c
    raise AssertionError("no Produce request with records in the samples")


def test_a_hit_is_the_same_root_and_its_crc_verdicts_count_again() -> None:
    c = produce_with_records()
    ctx = DecodeContext(decode_records=False)
    first = decode(c, ctx)
    once = ctx.crc_valid
    again = decode(c, ctx)
    assert again is first and ctx.crc_valid == 2 * once and ctx.malformed == 0


def test_no_hit_at_another_offset_or_version() -> None:
    ctx = DecodeContext()
    a = digest.digest_response(heartbeat_v4(27), 12, 4, ctx)
    # the same body after a header with a tag section: offsets 4 bytes further
    b = digest.digest_response(heartbeat_v4(27, b"\x01\x03\x02ab"), 12, 4, ctx)
    assert b is not a and b.child("body").offset == a.child("body").offset + 4
    assert b.child("body").child("error_code").offset == a.child("body").child("error_code").offset + 4
    # the same bytes as a Heartbeat v3 answer (not flexible): another body definition
    frame = heartbeat_v4(27)
    c = digest.digest_response(frame[:4] + frame[5:], 12, 3, ctx)
    assert c is not a and c.child("body").offset == 4 and c.child("body").child("error_code").value == 27
    # one entry per body bytes: the latest decode of those bytes is the one remembered
    d = digest.digest_response(heartbeat_v4(27), 12, 4, ctx)
    assert d is not a and dump(d) == dump(a)
    assert digest.digest_response(heartbeat_v4(27), 12, 4, ctx) is d


def test_bad_bytes_are_decoded_every_time() -> None:
    cut = metadata_v12_response([0, 3])[:-7]
    ctx = DecodeContext()
    a = digest.digest_response(cut, 3, 12, ctx)
    assert ctx.malformed == 1
    b = digest.digest_response(cut, 3, 12, ctx)
    assert b is not a and ctx.malformed == 2 and dump(a) == dump(b)
    # a limit hit is not remembered either
    ctx = DecodeContext(max_array_len=1)
    frame = metadata_v12_response([0, 0, 0])
    digest.digest_response(frame, 3, 12, ctx)
    digest.digest_response(frame, 3, 12, ctx)
    assert ctx.limits_hit == {"max_array_len": 2}


class Learning(dict):
    def __init__(self) -> None:
        super().__init__()
        self.learnt = 0

    def __setitem__(self, k: str, v: str) -> None:
        super().__setitem__(k, v)
        self.learnt += 1


def test_metadata_topic_ids_learnt_on_every_hit() -> None:
    ctx = DecodeContext()
    ctx.topic_names = names = Learning()
    frame = metadata_v12_response([0])
    a = digest.digest_response(frame, 3, 12, ctx)
    b = digest.digest_response(frame, 3, 12, ctx)
    assert b is a and names.learnt == 2 and list(names.values()) == ["t1"]


def test_bounded_and_not_pickled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(digest, "MEMO_MAX_ENTRIES", 2)
    ctx = DecodeContext()
    for err in (1, 2, 3, 4, 5):
        digest.digest_response(heartbeat_v4(err), 12, 4, ctx)
        assert ctx.digest_memo is not None and 1 <= len(ctx.digest_memo) <= 2
    # a body longer than MEMO_MAX_BODY is decoded every time
    monkeypatch.setattr(digest, "MEMO_MAX_BODY", 6)
    ctx = DecodeContext()
    a = digest.digest_response(heartbeat_v4(27), 12, 4, ctx)
    assert digest.digest_response(heartbeat_v4(27), 12, 4, ctx) is not a and not ctx.digest_memo
    monkeypatch.setattr(digest, "MEMO_MAX_BODY", 7)
    assert digest.digest_response(heartbeat_v4(27), 12, 4, ctx) is not a
    assert digest.digest_response(heartbeat_v4(27), 12, 4, ctx) is digest.digest_response(heartbeat_v4(27), 12, 4, ctx)
    assert ctx.digest_memo and pickle.loads(pickle.dumps(ctx)).digest_memo is None
    assert struct.calcsize(">ih") + 1 == 7      # heartbeat_v4's body: throttle, error, tags
