"""Rules on what the bytes allowed to judge: frames the capture cut short, frames that do
not decode, records whose CRC fails or that cannot be decoded, TLS not decrypted."""
from __future__ import annotations

import re

from analyzer.model import Exchange
from analyzer.pipeline import TLS_SKIPPED, Summary
from analyzer.sinks.insights import fetch_partitions, produce_partitions
from dissectors.field import MALFORMED, Field
from dissectors.field import body_of as _body
from dissectors.field import int_value as _int

from .common import FETCH, MAX_LIST, PRODUCE, ConnState, Finding, Settings, Unit


class Frames(Unit):
    """Frames cut short (not judged), malformed, with records whose CRC fails or that
    cannot be decoded."""
    ids = ("truncated-frame", "crc-mismatch", "malformed-frame", "undecodable-records")
    keyless = legacy = True

    def add(self, ex: Exchange, cs: ConnState) -> None:
        q, r = ex.request, ex.response
        if ex.status != "malformed" and ex.api_key not in (PRODUCE, FETCH) and not ex.partitions \
                and not (q is not None and q.truncated) and not (r is not None and r.truncated):
            return      # (nothing here to judge)
        on = self.on
        truncated = [side for side, fr in (("request", q), ("response", r)) if fr is not None and fr.truncated]
        if truncated and "truncated-frame" in on:
            frames = [fr.last_index for fr in (q, r) if fr is not None and fr.truncated]
            self.bucket("truncated-frame", "info", cs, (),
                        "{count} frame(s) with bytes missing from the capture (not judged)",
                        {}, advice="to have them judged, capture whole packets (tcpdump -s 0) with a buffer "
                                   "large enough that none is dropped (tcpdump -B)").add(ex, frames, n=len(frames))
        crc_frames: list[int] = []
        crc_counts = [0, 0]     # the batches whose CRC fails, of them control batches with CRC 0
        undecodable: list[tuple[int, str]] = []
        legacy = ex.protocol == "kafka-legacy"
        if (ex.api_key in (PRODUCE, FETCH) or (legacy and ex.partitions)) and (
                {"crc-mismatch", "undecodable-records"} & on):
            # pre-0.8: PRODUCE (0) and MULTIPRODUCE (3) carry messages in the request
            prod = ex.api_key in ((PRODUCE, 3) if legacy else (PRODUCE,))
            frame = ex.request_frame if prod else ex.response_frame
            tree = ex.request_tree if prod else ex.response_tree
            side_truncated = ("request" if prod else "response") in truncated
            if frame is not None and not side_truncated:
                if any(p.get("crc_ok") is False for p in ex.partitions):
                    crc_frames.append(frame)
            if frame is not None and not side_truncated and not legacy:
                walker = produce_partitions if prod else fetch_partitions
                for _t, _p, rec in walker(_body(tree)):
                    bad, why = _records_trouble(rec)
                    if bad:
                        if frame not in crc_frames:
                            crc_frames.append(frame)
                        n, zero = _crc_failures(rec)
                        crc_counts[0] += n
                        crc_counts[1] += zero
                    if why:
                        undecodable.append((frame, why))
        if crc_frames and "crc-mismatch" in on:
            n, zero = crc_counts
            if n and zero == n:
                # transaction markers the broker wrote without a CRC: the data batches are sound
                b = self.bucket("crc-mismatch", "error", cs, (ex.api_name, "control-crc-zero"),
                                "{count} {api_name} frame(s) with a record CRC mismatch, all in control batches "
                                "(transaction markers) whose CRC field is 0; the data batches' CRCs are valid",
                                {"api_name": ex.api_name, "kind": "control-crc-zero", "crc_batches": 0,
                                 "control_crc_zero": 0},
                                advice="the broker wrote these transaction markers without a CRC (a broker bug): "
                                       "the records are intact, but clients that verify CRCs (check.crcs) "
                                       "reject the batches; report it to the broker's maintainers")
            else:
                b = self.bucket("crc-mismatch", "error", cs, (ex.api_name, "data"),
                                "{count} {api_name} frame(s) with a record CRC mismatch",
                                {"api_name": ex.api_name, "kind": "data", "crc_batches": 0, "control_crc_zero": 0})
            b.details["crc_batches"] += n
            b.details["control_crc_zero"] += zero
            b.add(ex, crc_frames)
        if ex.status == "malformed" and ("malformed-frame" in on or "undecodable-records" in on):
            for side, fr, tree in (("request", q, ex.request_tree), ("response", r, ex.response_tree)):
                if fr is None or side in truncated:
                    continue
                hit = _first_malformed(tree)
                if hit is None:
                    continue
                reason, in_records = hit
                if in_records:
                    undecodable.append((fr.last_index, reason))
                elif "malformed-frame" in on:
                    self.bucket("malformed-frame", "error", cs, (ex.api_name, side),
                                "{count} malformed {api_name} {side}(s), first: {reason}",
                                {"api_name": ex.api_name, "side": side, "reason": reason}).add(ex, [fr.last_index])
        if undecodable and "undecodable-records" in on:
            b = self.bucket("undecodable-records", "warning", cs, (ex.api_name,),
                            "{count} {api_name} frame(s) with records that cannot be decoded, first: {reason}",
                            {"api_name": ex.api_name, "reason": undecodable[0][1]})
            b.add(ex, sorted({f for f, _ in undecodable}))


def _first_malformed(tree: Field | None) -> tuple[str, bool] | None:
    """The first malformed note of a tree and whether it sits inside a records field."""
    if tree is None:
        return None
    stack: list[tuple[Field, bool]] = [(tree, False)]
    while stack:
        f, in_records = stack.pop()
        in_records = in_records or f.type == "records" or f.name == "records"
        for n in f.notes or ():
            if n.startswith(MALFORMED):
                return n[len(MALFORMED):], in_records
        if f.children:
            stack.extend((c, in_records) for c in reversed(f.children))
    return None


_UNDECODABLE_WORDS = ("undecodable", "cannot decode", "unknown codec", "unsupported codec")


def _records_trouble(records: Field | None) -> tuple[bool, str | None]:
    """(crc invalid, undecodable reason) of a records field, from its notes and batch summaries."""
    if records is None:
        return False, None
    crc_bad = False
    undecodable: str | None = None
    for n in records.notes or ():
        low = n.lower()
        if "crc invalid" in low or "crc mismatch" in low:
            crc_bad = True
        elif any(w in low for w in _UNDECODABLE_WORDS):
            undecodable = n
    extra = records.extra or {}
    if extra.get("crc_ok") is False:
        crc_bad = True
    batches = extra.get("batches")
    if isinstance(batches, list):
        for b in batches:
            if isinstance(b, dict):
                if b.get("crc_ok") is False:
                    crc_bad = True
                err = b.get("error") or b.get("undecodable")
                if err and undecodable is None:
                    undecodable = str(err)
    elif records.children:   # no summary: look at the notes below (CRC verdicts sit on crc fields)
        for f in records.walk():
            for n in f.notes or ():
                low = n.lower()
                if "crc invalid" in low or "crc mismatch" in low:
                    crc_bad = True
                elif undecodable is None and any(w in low for w in _UNDECODABLE_WORDS):
                    undecodable = n
    return crc_bad, undecodable


_CRC_NOTE = re.compile(r"^\[(\d+)\]: crc INVALID \(0x([0-9a-f]{8})\)")


def _crc_failures(records: Field | None) -> tuple[int, int]:
    """(the batches and messages of a records field whose CRC does not match, how many of
    them are v2 control batches whose CRC field is 0): from the CRC fields of a full tree,
    or the notes of a lean one ("[i]: crc INVALID (0x...)", entry i being
    extra["batches"][i]). Control batches are told only when the field holds v2 batches
    alone (their records add up to the field's)."""
    if records is None:
        return 0, 0
    extra = records.extra or {}
    batches = extra.get("batches")
    failed: list[tuple[int, int]] = []     # (entry index, stored CRC) of the field's own entries
    count = 0
    if records.children:
        for f in records.walk():
            if f.name == "crc" and any(n.startswith("crc INVALID") for n in f.notes or ()):
                count += 1
        for e in records.children:
            crc = e.child("crc")
            if crc is not None and any(n.startswith("crc INVALID") for n in crc.notes or ()) \
                    and e.name.startswith("[") and e.name[1:-1].isdigit():
                failed.append((int(e.name[1:-1]), _int(crc.value) or 0))
    else:
        for n in records.notes or ():
            m = _CRC_NOTE.match(n)
            if m:
                count += 1
                failed.append((int(m.group(1)), int(m.group(2), 16)))
    if not failed or not isinstance(batches, list) or \
            sum(_int(b.get("record_count")) or 0 for b in batches if isinstance(b, dict)) != extra.get("records"):
        return count, 0
    zero = sum(1 for i, stored in failed if stored == 0 and i < len(batches) and isinstance(batches[i], dict)
               and batches[i].get("is_control") is True)
    return count, zero


class Encrypted(Unit):
    """TLS connections not decrypted: their Kafka traffic was not checked. Read from a
    run's summary (``Checker.encrypted``), not from exchanges."""
    ids = ("tls-not-decrypted",)

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.count = 0
        self.bytes = 0
        self.conns: list[str] = []      # the first MAX_LIST of them

    def follows(self, api_key: int | None, legacy: bool, requestless: bool) -> bool:
        return False

    def summary(self, summary: Summary) -> None:
        for t in summary.tls:
            if t.get("decryption", "").startswith("decrypting"):
                continue
            self.count += 1
            if len(self.conns) < MAX_LIST:
                self.conns.append(f"{t.get('client')} -> {t.get('broker')}")
        self.bytes += summary.bytes_skipped.get(TLS_SKIPPED, 0)

    def merge(self, other: Encrypted) -> None:
        self.count += other.count
        self.bytes += other.bytes
        self.conns = (self.conns + other.conns)[:MAX_LIST]

    def finish(self) -> list[Finding]:
        n = self.count
        if not n or "tls-not-decrypted" not in self.on:
            return []
        return [Finding("tls-not-decrypted", "warning",
                        f"{n} TLS connection{'s' if n != 1 else ''} not decrypted ({self.bytes} bytes): "
                        f"{'its' if n == 1 else 'their'} Kafka traffic was not checked",
                        ", ".join(self.conns) + (", ..." if n > len(self.conns) else ""),
                        details={"connections": n, "bytes": self.bytes},
                        advice="give the key log the clients wrote (SSLKEYLOGFILE) with --tls-keylog FILE")]
