"""Protocol currency (issue 23): trees that say everything the wire says, frames whose API
key or version we do not know, frames cut by the capture's snaplen, and the schema table
against Kafka's own message definitions."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from analyzer import pipeline
from dissectors.field import Field
from tests.conftest import SAMPLES

# ---------------------------------------------------------------------------- helpers


def exchanges(path: Path | str, ports: tuple[int, ...] = (9092,)) -> tuple[list[Any], Any]:
    run = pipeline.Run(str(path), pipeline.Options(ports=ports))
    return list(run), run.summary


def at(tree: Field, path: str) -> Field:
    f: Field | None = tree
    for part in path.split("/"):
        assert f is not None, path
        f = f.child(part)
    assert f is not None, path
    return f


# ------------------------------------------------------------------ trees: tags, NONE, CRCs


def test_tagged_field_sections_tag_numbers_and_none_on_a_real_api_versions_v4() -> None:
    exs, _ = exchanges(SAMPLES / "produce_fetch_kafkapython_zstd.pcap", (46091,))
    ex = next(e for e in exs if e.api_key == 18)
    body = at(ex.response_tree, "body")
    # error code 0 is named, as tshark's "No Error (0)"
    assert (body.child("error_code").value, body.child("error_code").notes) == (0, ["NONE"])
    # every struct of a flexible version shows its tagged-field section: each ApiVersion entry...
    first = body.child("api_keys").children[0]
    assert [(c.name, c.value) for c in first.children] == [
        ("api_key", 75), ("min_version", 0), ("max_version", 0), ("tagged_fields", 0)]
    assert (first.children[-1].offset, first.children[-1].length) == (13, 1)
    # ... and the body's own, here with the four tagged fields Kafka 3.3+ sends, each with its tag
    tags = body.children[-1]
    assert (tags.name, tags.value, tags.offset, tags.length) == ("tagged_fields", 4, 263, 20)
    assert [(c.name, c.value, c.notes) for c in tags.children] == [
        ("supported_features", 0, ["tag 0"]), ("finalized_features_epoch", -1, ["tag 1"]),
        ("finalized_features", 0, ["tag 2"]), ("zk_migration_ready", False, ["tag 3"])]
    # the request body (flexible v4) shows its empty section too
    req = at(ex.request_tree, "body")
    assert [(c.name, c.value) for c in req.children] == [
        ("client_software_name", "kafka-python"), ("client_software_version", "3.0.12"), ("tagged_fields", 0)]


def test_crc_in_hex_beside_the_verdict_on_real_batches() -> None:
    exs, _ = exchanges(SAMPLES / "produce_fetch_kafkapython_zstd.pcap", (46091,))
    produce = next(e for e in exs if e.api_key == 0)
    crcs = [f for f in produce.request_tree.walk() if f.name == "crc"]
    assert crcs
    for f in crcs:
        assert f.notes == [f"crc valid (0x{f.value:08x})"]
