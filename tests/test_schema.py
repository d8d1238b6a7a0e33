"""The protocol table (dissectors/schema_data.py): coverage, shape and agreement with others."""
from __future__ import annotations

import dataclasses
import importlib
import json
import re
import types
import typing
from pathlib import Path
from typing import Any

import pytest

from dissectors import schema
from dissectors.schema import ANY, APIS, PRIMITIVES, ApiDef, FieldDef, in_range

# Every (api_key, version) we decode: change it deliberately or not at all.
SUPPORTED: dict[int, tuple[int, int]] = {
    0: (0, 13), 1: (0, 18), 2: (0, 11), 3: (0, 13), 4: (0, 7), 5: (0, 4), 6: (0, 8), 7: (0, 3),
    8: (0, 10), 9: (0, 10), 10: (0, 6), 11: (0, 9), 12: (0, 4), 13: (0, 5), 14: (0, 5), 15: (0, 6),
    16: (0, 5), 17: (0, 1), 18: (0, 5), 19: (0, 7), 20: (0, 6), 21: (0, 2), 22: (0, 6), 23: (0, 4),
    24: (0, 5), 25: (0, 4), 26: (0, 5), 27: (0, 2), 28: (0, 6), 29: (0, 3), 30: (0, 3), 31: (0, 3),
    32: (0, 4), 33: (0, 2), 34: (0, 2), 35: (0, 5), 36: (0, 2), 37: (0, 3), 38: (0, 3), 39: (0, 2),
    40: (0, 2), 41: (0, 3), 42: (0, 3), 43: (0, 2), 44: (0, 1), 45: (0, 1), 46: (0, 0), 47: (0, 0),
    48: (0, 1), 49: (0, 1), 50: (0, 0), 51: (0, 0), 52: (0, 2), 53: (0, 1), 54: (0, 1), 55: (0, 2),
    56: (0, 3), 57: (0, 2), 58: (0, 0), 59: (0, 1), 60: (0, 2), 61: (0, 0), 62: (0, 4), 63: (0, 2),
    64: (0, 0), 65: (0, 0), 66: (0, 2), 67: (0, 0), 68: (0, 1), 69: (0, 1), 70: (0, 0), 71: (0, 0),
    72: (0, 0), 73: (0, 0), 74: (0, 1), 75: (0, 0), 76: (0, 1), 77: (0, 1), 78: (0, 2), 79: (0, 2),
    80: (0, 1), 81: (0, 0), 82: (0, 0), 83: (0, 0), 84: (0, 0), 85: (0, 1), 86: (0, 0), 87: (0, 1),
    88: (0, 1), 89: (0, 1), 90: (0, 1), 91: (0, 0), 92: (0, 0), 93: (0, 0), 94: (0, 0),
}

# What Kafka 4.x still serves (KIP-896 removed the rest in 4.0); None: the API is gone.
KAFKA4: dict[int, tuple[int, int] | None] = {
    0: (3, 13), 1: (4, 18), 2: (1, 11), 3: (0, 13), 4: None, 5: None, 6: None, 7: None,
    8: (2, 10), 9: (1, 10), 19: (2, 7), 20: (1, 6), 23: (2, 4), 27: (1, 2), 29: (1, 3), 30: (1, 3),
    31: (1, 3), 32: (1, 4), 34: (1, 2), 35: (1, 5), 38: (1, 3), 39: (1, 2), 40: (1, 2), 41: (1, 3),
    56: (2, 3), 76: (1, 1), 77: (1, 1), 78: (1, 2), 79: (1, 2), 11: (0, 9), 18: (0, 5), 28: (0, 6),
    42: (0, 3), 88: (0, 1), 89: (0, 1),
}


def supported_pairs() -> set[tuple[int, int]]:
    return {(k, v) for k, a in APIS.items() for v in range(a.min_version, a.max_version + 1)}


def test_exact_set_of_supported_pairs() -> None:
    expected = {(k, v) for k, (lo, hi) in SUPPORTED.items() for v in range(lo, hi + 1)}
    assert supported_pairs() == expected
    assert len(expected) == 368


@pytest.mark.parametrize(("key", "name", "lo", "hi", "flex"), [
    (0, "Produce", 0, 13, 9),
    (1, "Fetch", 0, 18, 12),
    (2, "ListOffsets", 0, 11, 6),
    (3, "Metadata", 0, 13, 9),
    (4, "LeaderAndIsr", 0, 7, 4),
    (7, "ControlledShutdown", 0, 3, 3),
    (8, "OffsetCommit", 0, 10, 8),
    (9, "OffsetFetch", 0, 10, 6),
    (11, "JoinGroup", 0, 9, 6),
    (17, "SaslHandshake", 0, 1, None),
    (18, "ApiVersions", 0, 5, 3),
    (19, "CreateTopics", 0, 7, 5),
    (36, "SaslAuthenticate", 0, 2, 2),
    (42, "DeleteGroups", 0, 3, 2),
    (47, "OffsetDelete", 0, 0, None),
    (68, "ConsumerGroupHeartbeat", 0, 1, 0),
    (74, "ListConfigResources", 0, 1, 0),
    (88, "StreamsGroupHeartbeat", 0, 1, 0),
    (89, "StreamsGroupDescribe", 0, 1, 0),
    (92, "DeleteShareGroupOffsets", 0, 0, 0),
])
def test_known_apis(key: int, name: str, lo: int, hi: int, flex: int | None) -> None:
    a = APIS[key]
    assert (a.key, a.name, a.min_version, a.max_version, a.flexible_from) == (key, name, lo, hi, flex)


def test_kafka4_versions() -> None:
    for key, want in KAFKA4.items():
        assert APIS[key].kafka4_versions == want, APIS[key].name
    assert [k for k, a in APIS.items() if a.kafka4_versions is None] == [4, 5, 6, 7]
    for a in APIS.values():
        if a.kafka4_versions is not None:
            assert a.min_version <= a.kafka4_versions[0] <= a.kafka4_versions[1] == a.max_version


def test_names_unique_and_listeners() -> None:
    assert len({a.name for a in APIS.values()}) == len(APIS)
    assert all(a.key == k for k, a in APIS.items())
    for a in APIS.values():
        assert a.listeners and set(a.listeners) <= {"broker", "controller", "zkBroker"}, a.name
    assert APIS[4].listeners == ("zkBroker",)
    # since Kafka 4.0 controllers serve the delegation-token APIs too
    assert [APIS[k].listeners for k in (38, 39, 40, 41)] == [("broker", "controller")] * 4
    assert schema.API_BY_NAME["apiversions"] is APIS[18]
    assert schema.api_name(0) == "Produce" and schema.api_name(999) == "Unknown(999)"


def test_header_versions() -> None:
    assert schema.request_header_version(7, 0) == 0          # ControlledShutdown v0: no client id
    assert schema.request_header_version(7, 1) == 1
    assert schema.request_header_version(0, 8) == 1
    assert schema.request_header_version(0, 9) == 2
    assert schema.request_header_version(18, 3) == 2
    assert schema.response_header_version(18, 3) == 0        # ApiVersions responses: always v0
    assert schema.response_header_version(0, 9) == 1
    assert schema.response_header_version(3, 8) == 0
    assert schema.request_header_version(0, 99) == 2         # above the table: as its newest


# ------------------------------------------------------------------------------ shape

def walk(fields: tuple[FieldDef, ...], path: str = ""):
    for f in fields:
        yield path + f.name, f
        yield from walk(f.fields, path + f.name + ".")


def test_structural_sanity() -> None:
    for a in APIS.values():
        for direction in ("request", "response"):
            for path, f in walk(getattr(a, direction)):
                where = f"{a.name} {direction} {path}"
                assert re.fullmatch(r"[a-z][a-z0-9_]*", f.name), where
                lo, hi = f.versions
                assert a.min_version <= lo <= hi and (hi == ANY or hi < a.max_version), where
                if f.type == "array":
                    assert f.element in PRIMITIVES or f.element == "struct", where
                    if f.element != "struct":
                        assert not f.fields, where
                    assert (f.element == "struct") == (f.struct is not None), where
                elif f.type == "struct":
                    assert f.struct and f.element is None, where
                else:
                    assert f.type in PRIMITIVES and f.element is None and not f.fields, where
                if f.element == "struct" or f.type == "struct":
                    assert f.fields, where
                for r in (f.nullable, f.tagged):
                    if r is not None:
                        assert lo <= r[0] <= r[1] and r[1] <= hi, where
                if f.nullable:
                    assert f.type in ("string", "bytes", "records", "array", "struct"), where
                if f.tagged is not None:
                    assert f.tag is not None and f.tag >= 0, where
                    assert a.flexible_from is not None and f.tagged[0] >= a.flexible_from, where
                else:
                    assert f.tag is None, where
                if f.fields:
                    for _, c in walk(f.fields):
                        assert lo <= c.versions[0] and c.versions[1] <= hi, where + "." + c.name


def test_tags_unique_per_struct_and_version() -> None:
    def check(a: ApiDef, fields: tuple[FieldDef, ...]) -> None:
        for v in range(a.min_version, a.max_version + 1):
            tags = [f.tag for f in fields if in_range(v, f.versions) and in_range(v, f.tagged)]
            assert len(tags) == len(set(tags)), a.name
            names = [f.name for f in fields if in_range(v, f.versions)]
            assert len(names) == len(set(names)), (a.name, v, names)
        for f in fields:
            check(a, f.fields)
    for a in APIS.values():
        check(a, a.request)
        check(a, a.response)


def expand(fields: tuple[FieldDef, ...], v: int) -> list[tuple[Any, ...]]:
    return [(f.name, f.type, f.element, in_range(v, f.nullable),
             f.tag if in_range(v, f.tagged) else None, expand(f.fields, v))
            for f in fields if in_range(v, f.versions)]


def names(fields: tuple[FieldDef, ...], v: int) -> list[str]:
    return [f.name for f in fields if in_range(v, f.versions)]


def sub(fields: tuple[FieldDef, ...], *path: str) -> FieldDef:
    f = None
    for p in path:
        f = next(x for x in fields if x.name == p)
        fields = f.fields
    assert f is not None
    return f


def test_old_and_new_versions_are_both_there() -> None:
    produce, fetch, lo = APIS[0], APIS[1], APIS[2]
    assert names(produce.request, 2) == ["acks", "timeout_ms", "topic_data"]
    assert names(produce.request, 3) == ["transactional_id", "acks", "timeout_ms", "topic_data"]
    td = sub(produce.request, "topic_data")
    assert names(td.fields, 12) == ["name", "partition_data"]
    assert names(td.fields, 13) == ["topic_id", "partition_data"]
    assert names(fetch.request, 0) == ["replica_id", "max_wait_ms", "min_bytes", "topics"]
    assert expand(fetch.request, 12)[0] == ("cluster_id", "string", None, True, 0, [])
    assert sub(fetch.request, "replica_state").tagged == (15, ANY)
    parts = sub(lo.request, "topics", "partitions")
    assert names(parts.fields, 0) == ["partition_index", "timestamp", "max_num_offsets"]
    assert names(parts.fields, 11) == ["partition_index", "current_leader_epoch", "timestamp"]
    assert names(sub(lo.response, "topics", "partitions").fields, 0) == [
        "partition_index", "error_code", "old_style_offsets"]
    assert names(APIS[4].request, 0)[:3] == ["controller_id", "controller_epoch", "ungrouped_partition_states"]
    assert sub(APIS[3].request, "topics").nullable == (1, ANY)
    assert names(APIS[18].request, 3) == ["client_software_name", "client_software_version"]


def test_meanings() -> None:
    def m(key: int, direction: str, *path: str) -> str | None:
        return sub(getattr(APIS[key], direction), *path).meaning
    assert m(0, "request", "acks") == "acks"
    assert m(0, "response", "responses", "partition_responses", "error_code") == "error_code"
    assert m(0, "response", "responses", "partition_responses", "log_append_time_ms") == "timestamp_ms"
    assert m(1, "request", "isolation_level") == "isolation_level"
    assert m(1, "request", "topics", "topic_id") == "topic_id"
    assert m(2, "request", "topics", "partitions", "timestamp") == "offset_spec"
    assert m(2, "response", "topics", "partitions", "timestamp") == "timestamp_ms"
    assert m(3, "response", "topics", "topic_id") == "topic_id"
    assert m(10, "request", "key_type") == "coordinator_type"
    assert m(11, "request", "protocols", "metadata") == "consumer_subscription"
    assert m(11, "response", "members", "metadata") == "consumer_subscription"
    assert m(14, "request", "assignments", "assignment") == "consumer_assignment"
    assert m(14, "response", "assignment") == "consumer_assignment"
    assert m(18, "response", "api_keys", "api_key") == "api_key"
    assert m(19, "request", "topics", "configs", "value") == "config_value"
    assert m(29, "request", "resource_type_filter") == "resource_type"
    assert m(30, "request", "creations", "operation") == "acl_operation"
    assert m(30, "request", "creations", "permission_type") == "acl_permission"
    assert m(30, "request", "creations", "resource_pattern_type") == "pattern_type"
    assert m(32, "response", "results", "configs", "config_source") == "config_source"
    assert m(32, "response", "results", "configs", "synonyms", "source") == "config_source"
    assert m(32, "response", "results", "configs", "value") == "config_value"
    assert m(19, "response", "topics", "configs", "config_source") == "config_source"
    assert m(15, "response", "groups", "members", "member_metadata") == "consumer_subscription"
    assert m(15, "response", "groups", "members", "member_assignment") == "consumer_assignment"
    assert sub(APIS[4].request, "type").versions == (5, ANY)
    assert sub(APIS[4].request, "is_kraft_controller").versions == (7, ANY)
    assert sub(APIS[22].request, "enable_2pc").versions == (6, ANY)
    assert m(36, "request", "auth_bytes") == "sasl_auth_bytes"
    assert m(36, "response", "auth_bytes") == "sasl_server_bytes"
    assert m(38, "response", "hmac") == "secret"
    assert m(41, "response", "tokens", "hmac") == "secret"
    assert m(51, "request", "upsertions", "salted_password") == "secret"
    assert m(51, "request", "upsertions", "salt") == "secret"
    # every error code field is marked, and nothing else is
    for a in APIS.values():
        for direction in ("request", "response"):
            for path, f in walk(getattr(a, direction)):
                is_err = f.type == "int16" and (f.name == "error_code" or f.name.endswith("_error_code"))
                assert (f.meaning == "error_code") == is_err, (a.name, path)
                if f.meaning == "topic_id":
                    assert f.type == "uuid"


# --------------------------------------------------------------- agreement with others

# our deliberate departures from the mechanical CamelCase -> snake_case split
SANE_NAMES = {"is_k_raft_controller": "is_kraft_controller", "k_raft_version_feature": "kraft_version_feature",
              "enable2_pc": "enable_2pc"}


def kafka_snake(name: str) -> str:
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", s).lower()
    return SANE_NAMES.get(s, s)


def kafka_range(s: str | None) -> tuple[int, int] | None:
    if s is None or s == "none":
        return None
    if s.endswith("+"):
        return (int(s[:-1]), ANY)
    lo, _, hi = s.partition("-")
    return (int(lo), int(hi or lo))


FACTS = Path(__file__).resolve().parent / "data" / "kafka_messages.json"


def facts_expand(nodes: list[list[Any]], v: int) -> list[tuple[Any, ...]]:
    """The fields of version ``v`` of a message in tests/data/kafka_messages.json (nodes
    [name, type, element, versions, nullable, tag, tagged, children]), as ``expand`` gives ours."""
    def within(r: list[int] | None) -> bool:
        return r is not None and r[0] <= v <= r[1]
    return [(name, typ, elem, within(nullable), tag if within(tagged) else None, facts_expand(kids, v))
            for name, typ, elem, versions, nullable, tag, tagged, kids in nodes if within(versions)]


def test_against_kafka_message_definitions() -> None:
    """The table against Kafka's message definitions (tests/data/kafka_messages.json, written
    by ``tools/gen_schema.py facts`` from Kafka's JSON definitions with Kafka 4.4's versions):
    for every version Kafka has of each message, the same fields, types, nullability and tags,
    the same flexible versions and listeners; and no newer version in Kafka than in the table,
    so a refresh from the next Kafka release fails here until the table has its versions."""
    facts = json.loads(FACTS.read_text())["apis"]
    assert len(facts) >= 52
    checked = 0
    for key, fact in facts.items():
        api = APIS[int(key)]
        lo, hi = fact["versions"]
        assert (api.name, api.max_version, api.kafka4_versions) == (fact["name"], hi, (lo, hi)), api.name
        assert api.min_version <= lo and api.flexible_from == fact["flexible_from"], api.name
        assert list(api.listeners) == fact["listeners"], api.name
        for v in range(lo, hi + 1):
            for direction in ("request", "response"):
                assert expand(getattr(api, direction), v) == facts_expand(fact[direction], v), \
                    (api.name, v, direction)
                checked += 1
    assert checked > 450
    # Kafka 4.4's versions are there (and fail the comparison above when the table lacks them)
    assert [facts[k]["versions"][1] for k in ("18", "28", "42")] == [5, 6, 3]


KIO_INT = {"error_code": "int16", "timedelta_i32": "int32", "timedelta_i64": "int64", "datetime_i64": "int64"}


def kio_expand(cls: type) -> list[tuple[Any, ...]]:
    out = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        t = hints[f.name]
        nullable = False
        if isinstance(t, types.UnionType) or typing.get_origin(t) is typing.Union:
            args = [a for a in typing.get_args(t) if a is not type(None)]
            nullable, t = True, args[0]
        arr = typing.get_origin(t) is tuple
        if arr:
            t = typing.get_args(t)[0]
        kt = f.metadata.get("kafka_type")
        name = f.name.rstrip("_")  # kio's "type_", "id_" are Kafka's Type, Id
        if kt in ("timedelta_i32", "timedelta_i64", "datetime_i64") and not name.endswith("_ms"):
            name += "_ms"          # kio drops Kafka's "Ms" suffix on durations and times
        name = SANE_NAMES.get(name, name)
        kids: list[tuple[Any, ...]] = []
        base = KIO_INT.get(kt, kt)
        if dataclasses.is_dataclass(t):
            base, kids = "struct", kio_expand(t)
        typ, elem = ("array", base) if arr else (base, None)
        nullable = nullable and typ in ("string", "bytes", "records", "array", "struct")
        out.append((name, typ, elem, nullable, f.metadata.get("tag"), kids))
    return out


# kio 0.6.2 holds Kafka 3.9.0's definitions; where Kafka 4.x redefined a version, we follow 4.x.
KIO_062_RENAMES = {  # (api_key, direction): {our name: 3.9's name} -- same wire format
    (52, "request"): {"replica_epoch": "candidate_epoch", "replica_id": "candidate_id",
                      "replica_directory_id": "candidate_directory_id"},   # KIP-996 (Vote)
    (74, "response"): {"config_resources": "client_metrics_resources",
                       "resource_name": "name"},  # ListClientMetricsResources -> ListConfigResources
    (28, "request"): {"generation_id_or_member_epoch": "generation_id"},   # renamed by Kafka 4.4
}
KIO_062_CHANGED = {(87, 0, "response")}  # 3.9's unstable v0 lacked leader_epoch; 4.x's v0 has it


def renamed(tree: list[tuple[Any, ...]], mapping: dict[str, str]) -> list[tuple[Any, ...]]:
    return [(mapping.get(n, n), *rest[:-1], renamed(rest[-1], mapping)) for n, *rest in tree]


def test_against_kio() -> None:
    index = pytest.importorskip("kio.schema.index")
    import kio
    if not kio.__version__.startswith("0.6.2"):
        pytest.skip(f"kio {kio.__version__} installed; this check knows 0.6.2 (Kafka 3.9.0)")
    checked = 0
    for key, api_name in index.api_key_map.items():
        api = APIS[key]
        for v, paths in index.schema_name_map[api_name].items():
            for direction in ("request", "response"):
                if (key, v, direction) in KIO_062_CHANGED:
                    continue
                et = next(e for e in paths if e.name == direction)
                mod, _, cls_name = paths[et].partition(":")
                cls = getattr(importlib.import_module(mod), cls_name)
                ours = renamed(expand(getattr(api, direction), v), KIO_062_RENAMES.get((key, direction), {}))
                assert ours == kio_expand(cls), (api.name, v, direction)
                assert schema.is_flexible(api, v) == cls.__flexible__
                checked += 1
    assert checked > 600
