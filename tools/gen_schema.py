"""Write dissectors/schema_data.py: every Kafka API key and every version, as our own table.

This script is run by hand, once (and again only when we deliberately refresh the
table); its output is committed and then owned like any other source file. Nothing
at run time imports this script, kio or kafka-python.

Where the facts come from (what the table really matches)
---------------------------------------------------------
* kio 0.6.2 (PyPI): Python classes generated from Apache Kafka 3.9.0's message
  definitions, one module per (API, version). It still holds every version that
  Kafka 4.0 removed (KIP-896) and the ZooKeeper-era APIs 4-7.
* kio 0.6.5 (PyPI): the same, generated from a Kafka 4.1-era set (old versions gone,
  the newest versions and API keys up to 92 added). For a version both sets hold,
  the newer set wins.
* kafka-python 3.0.12 (PyPI) ships Kafka 4.x's JSON message definitions for 52 client
  APIs (kafka/protocol/schemas/resources/*.json; ApiVersions 0-4, TxnOffsetCommit 0-5).
  They are used to check the field names, types, nullability and tags taken from kio,
  and for the ``listeners``.
* ``EXTRA_DEFINITIONS`` below: API keys 93 and 94, transcribed from apache/kafka trunk's
  message definitions (clients/src/main/resources/common/message, read through the
  search tool), without Kafka's "about" texts.
* ``KAFKA_4_4`` below: Kafka 4.4's new versions and renames (apache/kafka trunk, August
  2026), applied as edits to the newest version we have of each message: ApiVersions v5
  (KIP-1242: ClusterId, NodeId), TxnOffsetCommit v6 (KIP-1319: topics by TopicId, both
  directions), StreamsGroupHeartbeat v1 (KIP-1331: the response's int64
  AcceptableRecoveryLag after TaskOffsetIntervalMs, TopologyDescriptionRequired after the
  task assignments; the request unchanged), the renames TxnOffsetCommit v3+
  ``GenerationIdOrMemberEpoch`` and StreamsGroupHeartbeat v0's response
  ``AcceptableRecoveryLagLegacy``, and the delegation-token APIs (38-41) served by
  controllers too since 4.0. The trunk JSON files themselves were not readable here; the
  layouts come from byte-exact frames encoded from the trunk schema and from code
  generated from it, as found with the search tool. And DeleteGroups v3 (KIP-1331: a
  nullable ErrorMessage, "3+", after each result's ErrorCode; the request is v2's) and
  StreamsGroupDescribe v1 (KIP-1331: the request's bool IncludeTopologyDescription after
  IncludeAuthorizedOperations; after each DescribedGroup's AuthorizedOperations a nullable
  TopologyDescription struct, its four structs as in ``_topology_description_structs``,
  the int8 TopologyDescriptionStatus, and KIP-1357's nullable string AssignorName; none of
  them tagged). Their sources: Kafka's own DeleteGroupsRequest/Response.json and
  StreamsGroupDescribeRequest/Response.json at apache/kafka commit 678c0e07e473 (vendored
  by kafkars/kafka-wire under spec/upstream/apache-kafka/; DeleteGroupsResponse.json v3 also
  read as apache/kafka@3ef07f0e9aa7, DeleteGroupsRequest.json and
  StreamsGroupDescribeRequest.json as apache/kafka@07a283acad20), the generated PHP of
  longlang/phpkafka for the StreamsGroupDescribe structs, and krabka-protocol's byte-exact
  DeleteGroups v3 and StreamsGroupDescribe v1 request frames. That JSON, and that PHP,
  predate AssignorName (apache/kafka PR #22920, KIP-1357, merged 2026-07-29, whose diff
  shows the field added after TopologyDescriptionStatus, last in DescribedGroup); its type,
  nullability and versions (a nullable string, "1+", not tagged) are those of the codec
  krabka-protocol 0.8.0 (crates.io) generates for StreamsGroupDescribeResponse v1, not Kafka's
  JSON itself. Kafka's StreamsProtocolCrossVersionTest and the 4.4 Admin javadoc
  (StreamsGroupDescription's Optional assignorName) confirm that v1, and not v0, carries it.
  Checked once by hand: for every version Kafka's JSON at 678c0e07e473 defines (API keys
  0-93; 4-7 have none left there, 94 came later), the table expands to the same fields,
  types, nullability and tags, AssignorName apart. A newer version is shown with the newest known layout when
  it fits, else as raw bytes.
* Optional extra Kafka JSON definitions (``--json DIR``, files named like
  ``FooRequest.json`` / ``FooResponse.json``, with Kafka's // comments): versions they
  define replace the kio ones (used for API keys kio does not know, e.g. 93).

``facts`` writes what tests/test_schema.py compares the table with
(tests/data/kafka_messages.json): from a directory of Kafka JSON definitions (kafka-python's
bundled set by default, or a checkout's clients/src/main/resources/common/message), with
``KAFKA_4_4`` applied on top, each message's fields as version-ranged nodes (names, types,
nullability, tags; no texts). Refreshed from a newer Kafka, a version the table lacks is a
failing test.

kio renames the fields it types as durations or datetimes (``ThrottleTimeMs`` becomes
``throttle_time``); we restore Kafka's names (``throttle_time_ms``), which the check
against the JSON definitions confirms for every API both know. kio appends "_" to names that are Python builtins (``type_``, ``id_``); we drop it. kio also types UUIDs
and datetimes as optional; only strings, bytes, records, arrays and structs can be
nullable on the wire, so nullability is kept for those only.

How to re-run
-------------
    python tools/gen_schema.py fetch /tmp/gen_schema        # pip download + unpack the three wheels
    python tools/gen_schema.py generate /tmp/gen_schema [--json DIR] [-o dissectors/schema_data.py]
    python tools/gen_schema.py facts /tmp/gen_schema [--json DIR] [-o tests/data/kafka_messages.json]

``generate`` dumps each kio tree (in a subprocess, with the unpacked wheel on
sys.path) to WORKDIR/kio-<version>.json, merges the per-version field lists into
version-ranged FieldDefs, checks that re-expanding every version gives back exactly
the input lists, and writes the module.
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import glob
import importlib
import json
import os
import subprocess
import sys
import types
import typing
import zipfile
from pathlib import Path
from typing import Any

ANY = 0x7FFF
KIO_OLD = "0.6.2"
KIO_NEW = "0.6.5"
KAFKA_PYTHON = "3.0.12"
ROOT = Path(__file__).resolve().parents[1]

# kio's semantic integer types -> wire types
KIO_TYPES = {"error_code": "int16", "timedelta_i32": "int32", "timedelta_i64": "int64",
             "datetime_i64": "int64"}
KIO_TIME_TYPES = {"timedelta_i32", "timedelta_i64", "datetime_i64"}
# where the mechanical CamelCase -> snake_case split is not sane
SANE_NAMES = {"is_k_raft_controller": "is_kraft_controller", "k_raft_version_feature": "kraft_version_feature",
              "enable2_pc": "enable_2pc"}
NULLABLE_KINDS = {"string", "bytes", "records", "array", "struct"}

# listeners of the APIs the kafka-python JSON set does not cover (Kafka's "listeners")
LISTENERS: dict[int, tuple[str, ...]] = {
    4: ("zkBroker",), 5: ("zkBroker",), 6: ("zkBroker",), 7: ("zkBroker", "controller"),
    38: ("broker", "controller"), 39: ("broker", "controller"), 40: ("broker", "controller"),
    41: ("broker", "controller"),       # delegation tokens: controllers serve them too since 4.0
    52: ("controller",), 53: ("controller",), 54: ("controller",),
    56: ("controller",), 58: ("controller",), 59: ("controller",),
    62: ("controller",), 63: ("controller",), 64: ("broker", "controller"),
    67: ("controller",), 68: ("broker",), 69: ("broker",), 70: ("controller",),
    71: ("broker",), 72: ("broker",), 73: ("controller",),
    76: ("broker",), 77: ("broker",), 78: ("broker",), 79: ("broker",),
    80: ("controller", "broker"), 81: ("controller", "broker"), 82: ("controller",),
    83: ("broker",), 84: ("broker",), 85: ("broker",), 86: ("broker",), 87: ("broker",),
    88: ("broker",), 89: ("broker",), 90: ("broker",), 91: ("broker",), 92: ("broker",),
}


def _topology_description_structs(since: str) -> list[dict[str, Any]]:
    """KIP-1331's topology description, as Kafka declares it in both
    StreamsGroupTopologyDescriptionUpdateRequest.json (key 93, ``since`` "0+") and
    StreamsGroupDescribeResponse.json (key 89, "1+"): the same four common structs, the same
    fields in the same order."""
    return [{"name": "TopologyDescription",
             "versions": since,
             "fields": [{"name": "Subtopologies", "type": "[]TopologyDescriptionSubtopology", "versions": since},
                        {"name": "GlobalStores", "type": "[]TopologyDescriptionGlobalStore", "versions": since}]},
            {"name": "TopologyDescriptionSubtopology",
             "versions": since,
             "fields": [{"name": "SubtopologyId", "type": "string", "versions": since},
                        {"name": "Nodes", "type": "[]TopologyDescriptionNode", "versions": since}]},
            {"name": "TopologyDescriptionNode",
             "versions": since,
             "fields": [{"name": "Name", "type": "string", "versions": since},
                        {"name": "NodeType", "type": "int8", "versions": since},
                        {"name": "SourceTopics", "type": "[]string", "versions": since},
                        {"name": "SinkTopic", "type": "string", "versions": since, "nullableVersions": since},
                        {"name": "Stores", "type": "[]string", "versions": since},
                        {"name": "Successors", "type": "[]string", "versions": since}]},
            {"name": "TopologyDescriptionGlobalStore",
             "versions": since,
             "fields": [{"name": "Source", "type": "TopologyDescriptionNode", "versions": since},
                        {"name": "Processor", "type": "TopologyDescriptionNode", "versions": since}]}]


# Definitions newer than kio 0.6.5 knows, read from apache/kafka's trunk message definitions
# through the search tool (our transcription; Kafka's "about" texts dropped):
# StreamsGroupTopologyDescriptionUpdate{Request,Response}.json (key 93) and
# UnregisterController{Request,Response}.json (key 94; the stored request revision still
# said 93, from before 93 went to StreamsGroupTopologyDescriptionUpdate).
EXTRA_DEFINITIONS: list[dict[str, Any]] = [{"apiKey": 93,
  "type": "request",
  "listeners": ["broker"],
  "name": "StreamsGroupTopologyDescriptionUpdateRequest",
  "validVersions": "0",
  "flexibleVersions": "0+",
  "fields": [{"name": "GroupId", "type": "string", "versions": "0+"},
             {"name": "MemberId", "type": "string", "versions": "0+"},
             {"name": "TopologyEpoch", "type": "int32", "versions": "0+"},
             {"name": "TopologyDescription", "type": "TopologyDescription", "versions": "0+"}],
  "commonStructs": _topology_description_structs("0+")},
 {"apiKey": 93,
  "type": "response",
  "name": "StreamsGroupTopologyDescriptionUpdateResponse",
  "validVersions": "0",
  "flexibleVersions": "0+",
  "fields": [{"name": "ThrottleTimeMs", "type": "int32", "versions": "0+"},
             {"name": "ErrorCode", "type": "int16", "versions": "0+"},
             {"name": "ErrorMessage", "type": "string", "versions": "0+", "nullableVersions": "0+"}]},
 {"apiKey": 94,
  "type": "request",
  "listeners": ["broker", "controller"],
  "name": "UnregisterControllerRequest",
  "validVersions": "0",
  "flexibleVersions": "0+",
  "fields": [{"name": "ControllerId", "type": "int32", "versions": "0+"}]},
 {"apiKey": 94,
  "type": "response",
  "name": "UnregisterControllerResponse",
  "validVersions": "0",
  "flexibleVersions": "0+",
  "fields": [{"name": "ThrottleTimeMs", "type": "int32", "versions": "0+"},
             {"name": "ErrorCode", "type": "int16", "versions": "0+"},
             {"name": "ErrorMessage", "type": "string", "versions": "0+", "nullableVersions": "0+"}]}]


# ------------------------------------------------------------------------- Kafka 4.4

PerVersion = dict[int, dict[str, tuple[bool, list[dict[str, Any]]]]]


def _vf(name: str, typ: str, nullable: bool = False) -> dict[str, Any]:
    return {"name": name, "type": typ, "element": None, "struct": None, "fields": [], "nullable": nullable,
            "tag": None, "hint": None}


def _renamed(vfs: list[dict[str, Any]], old: str, new: str) -> list[dict[str, Any]]:
    return [dict(f, name=new) if f["name"] == old else f for f in vfs]


def _inserted_after(vfs: list[dict[str, Any]], after: str, new: dict[str, Any]) -> list[dict[str, Any]]:
    i = next(i for i, f in enumerate(vfs) if f["name"] == after)
    return vfs[:i + 1] + [new] + vfs[i + 1:]


def _topic_by_id(vfs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``topics``' elements identified by ``topic_id`` (uuid) instead of ``name``."""
    out = []
    for f in vfs:
        if f["name"] == "topics":
            f = dict(f, fields=[_vf("topic_id", "uuid") if c["name"] == "name" else c for c in f["fields"]])
        out.append(f)
    return out


def _next_version(pv: PerVersion, request: Any, response: Any) -> None:
    """Add the version after the newest in ``pv``: each direction's newest field list
    passed through its edit function."""
    v = max(pv)
    flex_q, req = pv[v]["request"]
    flex_s, resp = pv[v]["response"]
    pv[v + 1] = {"request": (flex_q, request(copy.deepcopy(req))),
                 "response": (flex_s, response(copy.deepcopy(resp)))}


def _same(vfs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return vfs


def _api_versions_v5(pv: PerVersion) -> None:
    # KIP-1242: the client names the cluster and node it means to reach (both may be
    # unknown: a null ClusterId, NodeId -1); the response is v4's
    _next_version(pv, lambda q: q + [_vf("cluster_id", "string", nullable=True), _vf("node_id", "int32")], _same)


def _txn_offset_commit_v6(pv: PerVersion) -> None:
    # the rename of v3+'s generation id (a member epoch for the new consumer protocol)
    for dirs in pv.values():
        flex, req = dirs["request"]
        dirs["request"] = (flex, _renamed(req, "generation_id", "generation_id_or_member_epoch"))
    # KIP-1319: v6 names topics by id, in the request and in the response
    _next_version(pv, _topic_by_id, _topic_by_id)


def _streams_group_heartbeat_v1(pv: PerVersion) -> None:
    flex, resp = pv[0]["response"]
    pv[0]["response"] = (flex, _renamed(resp, "acceptable_recovery_lag", "acceptable_recovery_lag_legacy"))

    def response(vfs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        vfs = [f for f in vfs if f["name"] != "acceptable_recovery_lag_legacy"]
        vfs = _inserted_after(vfs, "task_offset_interval_ms", _vf("acceptable_recovery_lag", "int64"))
        return _inserted_after(vfs, "warmup_tasks", _vf("topology_description_required", "bool"))
    # KIP-1331: the request is v0's (bumped so that the v1 response is negotiated)
    _next_version(pv, _same, response)


def _with_element_fields(vfs: list[dict[str, Any]], array: str,
                         more: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``array``'s elements with the fields ``more`` after their own."""
    return [dict(f, fields=f["fields"] + copy.deepcopy(more)) if f["name"] == array else f for f in vfs]


def _delete_groups_v3(pv: PerVersion) -> None:
    # KIP-1331: each result says why its group was not deleted (a nullable ErrorMessage, "3+");
    # the request is v2's
    _next_version(pv, _same, lambda s: _with_element_fields(
        s, "results", [_vf("error_message", "string", nullable=True)]))


# StreamsGroupDescribeResponse v1's additions to each DescribedGroup, after AuthorizedOperations
# (Kafka's JSON, with AssignorName as the generated codec of krabka-protocol 0.8.0 has it: see
# the module docstring)
_DESCRIBED_GROUP_V1: list[dict[str, Any]] = [
    {"name": "TopologyDescription", "type": "TopologyDescription", "versions": "1+", "nullableVersions": "1+"},
    {"name": "TopologyDescriptionStatus", "type": "int8", "versions": "1+"},
    {"name": "AssignorName", "type": "string", "versions": "1+", "nullableVersions": "1+"}]


def _streams_group_describe_v1(pv: PerVersion) -> None:
    # KIP-1331 (IncludeTopologyDescription; TopologyDescription, TopologyDescriptionStatus) and
    # KIP-1357 (AssignorName)
    common = {c["name"]: c["fields"] for c in _topology_description_structs("1+")}
    added = vf_from_json(_DESCRIBED_GROUP_V1, 1, common)
    _next_version(pv, lambda q: q + [_vf("include_topology_description", "bool")],
                  lambda s: _with_element_fields(s, "groups", added))


# api_key -> the edit that brings what we have of it to Kafka 4.4 (see the module docstring)
KAFKA_4_4: dict[int, Any] = {18: _api_versions_v5, 28: _txn_offset_commit_v6, 42: _delete_groups_v3,
                             88: _streams_group_heartbeat_v1, 89: _streams_group_describe_v1}


# ---------------------------------------------------------------------------- fetch

def cmd_fetch(workdir: Path) -> None:
    for name, ver, sub in (("kio", KIO_OLD, "kio-old"), ("kio", KIO_NEW, "kio-new"),
                           ("kafka-python", KAFKA_PYTHON, "kafka-python")):
        dest = workdir / sub
        dest.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q",
                        f"{name}=={ver}", "-d", str(dest)], check=True)
        for whl in glob.glob(str(dest / "*.whl")):
            with zipfile.ZipFile(whl) as z:
                z.extractall(dest / "ex")


# ----------------------------------------------------------------- kio dump (subprocess)

def _kio_desc(cls: type) -> list[dict[str, Any]]:
    res = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        t = hints[f.name]
        nullable = False
        if isinstance(t, types.UnionType) or typing.get_origin(t) is typing.Union:
            args = typing.get_args(t)
            non = [a for a in args if a is not type(None)]
            nullable = len(non) != len(args)
            t = non[0]
        d: dict[str, Any] = {"name": f.name, "ktype": f.metadata.get("kafka_type"),
                             "nullable": nullable, "tag": f.metadata.get("tag")}
        if typing.get_origin(t) is tuple:
            d["array"] = True
            t = typing.get_args(t)[0]
        if dataclasses.is_dataclass(t):
            d["struct"] = t.__name__
            d["fields"] = _kio_desc(t)
        res.append(d)
    return res


def cmd_dump_kio(kio_root: str, out: str) -> None:
    sys.path.insert(0, kio_root)
    from kio.schema.index import api_key_map, schema_name_map  # type: ignore[import-not-found]
    from kio.static.constants import EntityType  # type: ignore[import-not-found]

    data: dict[str, Any] = {}
    for key, name in api_key_map.items():
        for v, tm in schema_name_map[name].items():
            for et in (EntityType.request, EntityType.response):
                path = tm.get(et)
                if not path:
                    continue
                mod, _, clsname = path.partition(":")
                cls = getattr(importlib.import_module(mod), clsname)
                entry = data.setdefault(str(key), {"name": name, "versions": {}})
                entry["versions"].setdefault(str(v), {})[et.name] = {
                    "flexible": cls.__flexible__, "cls": cls.__name__, "fields": _kio_desc(cls)}
    with open(out, "w") as fh:
        json.dump(data, fh)


# ------------------------------------------------------------------ Kafka JSON reading

def strip_comments(text: str) -> str:
    out = []
    i, n, in_str = 0, len(text), False
    while i < n:
        c = text[i]
        if in_str:
            out.append(c)
            if c == "\\":
                out.append(text[i + 1])
                i += 2
                continue
            if c == '"':
                in_str = False
            i += 1
            continue
        if c == '"':
            in_str = True
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
            continue
        out.append(c)
        i += 1
    return "".join(out)


def load_kafka_json(path: str) -> dict[str, Any]:
    with open(path) as fh:
        return json.loads(strip_comments(fh.read()))


def vrange(s: str | None) -> tuple[int, int] | None:
    if s is None or s == "none":
        return None
    if s.endswith("+"):
        return (int(s[:-1]), ANY)
    if "-" in s:
        a, b = s.split("-")
        return (int(a), int(b))
    return (int(s), int(s))


def inr(v: int, r: tuple[int, int] | None) -> bool:
    return r is not None and r[0] <= v <= r[1]


def snake(name: str) -> str:
    import re
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", s)
    return s.lower()


# A per-version field: plain dict with name, type, element, struct, nullable, tag, fields, hint.

def vf_from_json(fields: list[dict[str, Any]], v: int, common: dict[str, Any]) -> list[dict[str, Any]]:
    res = []
    for f in fields:
        if not inr(v, vrange(f["versions"])):
            continue
        t = f["type"]
        arr = t.startswith("[]")
        base = t[2:] if arr else t
        name = snake(f["name"])
        d: dict[str, Any] = {"name": SANE_NAMES.get(name, name), "element": None, "struct": None, "fields": [],
                             "nullable": inr(v, vrange(f.get("nullableVersions"))),
                             "tag": f["tag"] if inr(v, vrange(f.get("taggedVersions"))) else None,
                             "hint": None}
        if base[0].isupper():
            sub = f.get("fields")
            if sub is None:
                sub = common[base]
            d["struct"] = base
            d["fields"] = vf_from_json(sub, v, common)
            prim = "struct"
        else:
            prim = base
        if arr:
            d["type"], d["element"] = "array", prim
        else:
            d["type"] = prim
        res.append(d)
    return res


def vf_from_kio(fields: list[dict[str, Any]]) -> list[dict[str, Any]]:
    res = []
    for f in fields:
        kt = f["ktype"]
        name = f["name"].rstrip("_")  # kio appends "_" to Python builtins: Kafka's Type, Id
        if kt in KIO_TIME_TYPES and not name.endswith("_ms"):
            name += "_ms"
        name = SANE_NAMES.get(name, name)
        prim = "struct" if f.get("struct") else KIO_TYPES.get(kt, kt)
        d: dict[str, Any] = {"name": name, "element": None, "struct": f.get("struct"),
                             "fields": vf_from_kio(f.get("fields", [])), "tag": f["tag"],
                             "hint": kt if kt in ("datetime_i64", "error_code") else None}
        if f.get("array"):
            d["type"], d["element"] = "array", prim
        else:
            d["type"] = prim
        d["nullable"] = bool(f["nullable"]) and d["type"] in NULLABLE_KINDS
        res.append(d)
    return res


def vf_signature(vfs: list[dict[str, Any]]) -> list[Any]:
    """What the wire (and our names) depend on: used to compare two sources."""
    return [(f["name"], f["type"], f["element"], f["nullable"], f["tag"], vf_signature(f["fields"]))
            for f in vfs]


# ------------------------------------------------------------------------ merging

class Node:
    def __init__(self, vf: dict[str, Any]) -> None:
        self.name: str = vf["name"]
        self.type: str = vf["type"]
        self.element: str | None = vf["element"]
        self.struct: str | None = vf["struct"]
        self.versions: list[int] = []
        self.nullable: list[int] = []
        self.tagged: list[int] = []
        self.tag: int | None = vf["tag"]
        self.hints: set[str] = set()
        self.children: list[Node] = []

    def accepts(self, vf: dict[str, Any], v: int) -> bool:
        return (self.name == vf["name"] and self.type == vf["type"] and self.element == vf["element"]
                and self.versions[-1] == v - 1
                and (vf["tag"] is None or self.tag is None or self.tag == vf["tag"])
                and (vf["struct"] is None or self.struct is None or self.struct == vf["struct"]))


def merge_version(nodes: list[Node], vfs: list[dict[str, Any]], v: int) -> None:
    pos = 0
    for vf in vfs:
        idx = next((i for i in range(pos, len(nodes)) if nodes[i].accepts(vf, v)), None)
        if idx is None:
            nodes.insert(pos, Node(vf))
            idx = pos
        n = nodes[idx]
        n.versions.append(v)
        if vf["nullable"]:
            n.nullable.append(v)
        if vf["tag"] is not None:
            n.tagged.append(v)
            n.tag = vf["tag"]
        if vf["struct"] and not n.struct:
            n.struct = vf["struct"]
        if vf["hint"]:
            n.hints.add(vf["hint"])
        merge_version(n.children, vf["fields"], v)
        pos = idx + 1


def contiguous(vs: list[int], what: str) -> tuple[int, int] | None:
    if not vs:
        return None
    lo, hi = min(vs), max(vs)
    if sorted(vs) != list(range(lo, hi + 1)):
        raise SystemExit(f"non-contiguous {what}: {vs}")
    return (lo, hi)


# ------------------------------------------------------------------------ meanings

CONFIG_VALUE_APIS = {19, 32, 33, 44}
SECRET_FIELDS = {(38, "response", "hmac"), (39, "request", "hmac"), (40, "request", "hmac"),
                 (41, "response", "hmac"), (51, "request", "salt"), (51, "request", "salted_password")}


def meaning_of(key: int, direction: str, path: tuple[str, ...], n: Node) -> str | None:
    name, t = n.name, n.type
    if t == "int16" and ("error_code" in n.hints or name == "error_code" or name.endswith("_error_code")):
        return "error_code"
    if t == "int16" and name == "api_key":
        return "api_key"
    if t == "int64" and key == 2 and direction == "request" and name == "timestamp":
        return "offset_spec"
    if t == "int64" and ("datetime_i64" in n.hints or name.endswith("timestamp")
                         or name.endswith("timestamp_ms")
                         or name in ("log_append_time_ms", "transaction_start_time_ms")):
        return "timestamp_ms"
    if key == 0 and direction == "request" and name == "acks":
        return "acks"
    if t == "int8":
        if name == "isolation_level":
            return "isolation_level"
        if name in ("resource_type", "resource_type_filter"):
            return "resource_type"
        if name in ("pattern_type", "pattern_type_filter", "resource_pattern_type",
                    "resource_pattern_type_filter"):
            return "pattern_type"
        if name == "operation" and key in (29, 30, 31):
            return "acl_operation"
        if name == "permission_type":
            return "acl_permission"
        if key in (19, 32) and name in ("config_source", "source"):
            return "config_source"
        if key == 10 and name == "key_type":
            return "coordinator_type"
    if t == "uuid" and name == "topic_id":
        return "topic_id"
    if t == "bytes":
        if key == 11 and name == "metadata" and path[-1:] in (("protocols",), ("members",)):
            return "consumer_subscription"
        if key == 14 and name == "assignment":
            return "consumer_assignment"
        if key == 15 and name == "member_metadata":  # DescribeGroups: the members' JoinGroup metadata
            return "consumer_subscription"
        if key == 15 and name == "member_assignment":
            return "consumer_assignment"
        if key == 36 and name == "auth_bytes":
            return "sasl_auth_bytes" if direction == "request" else "sasl_server_bytes"
    if (key, direction, name) in SECRET_FIELDS and t in ("bytes", "string"):
        return "secret"
    if t == "string" and name == "value" and key in CONFIG_VALUE_APIS:
        return "config_value"
    return None


# ------------------------------------------------------------------------ output

def q(s: str) -> str:
    assert '"' not in s and "\\" not in s
    return f'"{s}"'


def fmt_range(r: tuple[int, int] | None, api_max: int) -> str:
    assert r is not None
    lo, hi = r
    return f"({lo}, {'ANY' if hi >= api_max else hi})"


def emit_nodes(nodes: list[Node], key: int, direction: str, path: tuple[str, ...], api_max: int,
               indent: int, out: list[str]) -> None:
    pad = " " * indent
    for n in nodes:
        args = [q(n.name), q(n.type), fmt_range(contiguous(n.versions, n.name), api_max)]
        nr = contiguous(n.nullable, n.name + " nullable")
        if nr:
            args.append(f"nullable={fmt_range(nr, api_max)}")
        tr = contiguous(n.tagged, n.name + " tagged")
        if tr:
            args.append(f"tag={n.tag}")
            args.append(f"tagged={fmt_range(tr, api_max)}")
        if n.struct and (n.type == "struct" or n.element == "struct"):
            args.append(f"struct={q(n.struct)}")
        if n.element:
            args.append(f"element={q(n.element)}")
        m = meaning_of(key, direction, path, n)
        if m:
            args.append(f"meaning={q(m)}")
        if n.children:
            out.append(f"{pad}F({', '.join(args)}, fields=(")
            emit_nodes(n.children, key, direction, path + (n.name,), api_max, indent + 4, out)
            out.append(f"{pad})),")
        elif n.type == "struct" or n.element == "struct":
            out.append(f"{pad}F({', '.join(args)}, fields=()),")
        else:
            out.append(f"{pad}F({', '.join(args)}),")


def expand_nodes(nodes: list[Node], v: int) -> list[Any]:
    return [(n.name, n.type, n.element, v in n.nullable, n.tag if v in n.tagged else None,
             expand_nodes(n.children, v)) for n in nodes if v in n.versions]


# ------------------------------------------------------------------------ generate

def ensure_kio_dump(workdir: Path, sub: str) -> dict[str, Any]:
    out = workdir / f"{sub}.json"
    if not out.exists():
        subprocess.run([sys.executable, __file__, "_dump-kio", str(workdir / sub / "ex"), str(out)],
                       check=True)
    with open(out) as fh:
        return json.load(fh)


def load_json_dir(d: str) -> dict[int, dict[str, dict[str, Any]]]:
    res: dict[int, dict[str, dict[str, Any]]] = {}
    for p in sorted(glob.glob(os.path.join(d, "*.json"))):
        j = load_kafka_json(p)
        if j.get("type") in ("request", "response") and "apiKey" in j:
            res.setdefault(j["apiKey"], {})[j["type"]] = j
    return res


def cmd_generate(workdir: Path, json_dirs: list[str], out_path: Path) -> None:
    kio_old = ensure_kio_dump(workdir, "kio-old")
    kio_new = ensure_kio_dump(workdir, "kio-new")
    kp_dir = workdir / "kafka-python" / "ex" / "kafka" / "protocol" / "schemas" / "resources"
    check_json = load_json_dir(str(kp_dir))
    if len(check_json) < 50:
        raise SystemExit(f"kafka-python's JSON definitions not found under {kp_dir}")
    extra: dict[int, dict[str, dict[str, Any]]] = {}
    for j in EXTRA_DEFINITIONS:
        extra.setdefault(j["apiKey"], {})[j["type"]] = j
    for d in json_dirs:
        for k, v in load_json_dir(d).items():
            extra.setdefault(k, {}).update(v)

    keys = sorted({int(k) for k in kio_old} | {int(k) for k in kio_new} | set(extra))
    problems: list[str] = []
    lines: list[str] = []
    for key in keys:
        # per version: {direction: (flexible, [vf])}
        per_version: dict[int, dict[str, tuple[bool, list[dict[str, Any]]]]] = {}
        name = None
        for src in (kio_old, kio_new):
            entry = src.get(str(key))
            if not entry:
                continue
            for vs, dirs in entry["versions"].items():
                per_version[int(vs)] = {d: (x["flexible"], vf_from_kio(x["fields"])) for d, x in dirs.items()}
                name = dirs["request"]["cls"].removesuffix("Request")
        for direction, j in extra.get(key, {}).items():
            vr = vrange(j["validVersions"])
            assert vr is not None
            flex = vrange(j.get("flexibleVersions"))
            common = {c["name"]: c["fields"] for c in j.get("commonStructs", [])}
            for v in range(vr[0], vr[1] + 1):
                per_version.setdefault(v, {})[direction] = (inr(v, flex), vf_from_json(j["fields"], v, common))
            name = j["name"].removesuffix("Request").removesuffix("Response")
        assert name is not None
        # the JSON definitions kafka-python ships: check names, types, nullability, tags
        for direction, j in check_json.get(key, {}).items():
            vr = vrange(j["validVersions"])
            assert vr is not None
            common = {c["name"]: c["fields"] for c in j.get("commonStructs", [])}
            for v in range(vr[0], vr[1] + 1):
                ours = per_version.get(v, {}).get(direction)
                theirs = vf_from_json(j["fields"], v, common)
                if ours is None or vf_signature(ours[1]) != vf_signature(theirs):
                    problems.append(f"{name} v{v} {direction}: differs from the JSON definition")
                if ours is not None and ours[0] != inr(v, vrange(j.get("flexibleVersions"))):
                    problems.append(f"{name} v{v} {direction}: flexible differs")
        if key in KAFKA_4_4:
            KAFKA_4_4[key](per_version)
        versions = sorted(per_version)
        lo, hi = versions[0], versions[-1]
        if versions != list(range(lo, hi + 1)):
            problems.append(f"{name}: versions not contiguous {versions}")
        flex_vs = [v for v in versions if per_version[v]["request"][0]]
        flexible_from = min(flex_vs) if flex_vs else None
        for v in versions:
            for d in ("request", "response"):
                if per_version[v][d][0] != (flexible_from is not None and v >= flexible_from):
                    problems.append(f"{name} v{v} {d}: flexible flag inconsistent")
        trees: dict[str, list[Node]] = {}
        for d in ("request", "response"):
            nodes: list[Node] = []
            for v in versions:
                merge_version(nodes, per_version[v][d][1], v)
            for v in versions:
                if expand_nodes(nodes, v) != _sig_plain(per_version[v][d][1]):
                    problems.append(f"{name} v{v} {d}: merged tree does not re-expand to the input")
            trees[d] = nodes
        if str(key) in kio_new:
            nv = sorted(int(x) for x in kio_new[str(key)]["versions"])
            k4: tuple[int, int] | None = (nv[0], hi if key in KAFKA_4_4 else nv[-1])
        elif key in extra:
            k4 = (lo, hi)
        else:
            k4 = None
        listeners = tuple(check_json.get(key, {}).get("request", {}).get("listeners", ())) \
            or tuple(extra.get(key, {}).get("request", {}).get("listeners", ())) or LISTENERS.get(key, ())
        if not listeners:
            problems.append(f"{name}: no listeners known")
        lines.append("")
        lines.append(f"APIS[{key}] = ApiDef({key}, {q(name)}, {lo}, {hi}, {flexible_from}, request=(")
        emit_nodes(trees["request"], key, "request", (), hi, 4, lines)
        lines.append("), response=(")
        emit_nodes(trees["response"], key, "response", (), hi, 4, lines)
        ls = ", ".join(q(x) for x in listeners) + ("," if len(listeners) == 1 else "")
        lines.append(f"), kafka4_versions={k4!r}, listeners=({ls}))")

    if problems:
        print("\n".join(problems), file=sys.stderr)
        raise SystemExit(f"{len(problems)} problems; nothing written")
    header = [
        '"""Every Kafka API key and version: the declarative protocol table.',
        "",
        "Written once by tools/gen_schema.py from the protocol's facts (see its docstring for the",
        "sources and how to re-run it), then owned here: edit it by hand like any source file.",
        "",
        "F(name, type, versions, ...) is dissectors.schema.FieldDef; ranges are inclusive and ANY",
        "means \"and every later version\". Tagged fields stay where Kafka declares them; on the wire",
        "they travel in the tagged-field section of their struct, in tag order.",
        '"""',
        "from dissectors.schema import ANY, ApiDef, FieldDef",
        "",
        "F = FieldDef",
        "",
        "APIS: dict[int, ApiDef] = {}",
    ]
    out_path.write_text("\n".join(header + lines) + "\n")
    print(f"wrote {out_path}: {len(keys)} APIs")


# ------------------------------------------------------------------------ facts

def fact_nodes(nodes: list[Node]) -> list[Any]:
    """Merged nodes as compact JSON: [name, type, element, versions, nullable versions, tag,
    tagged versions, children], each version range [lo, hi] or null."""
    def rng(vs: list[int], what: str) -> list[int] | None:
        r = contiguous(vs, what)
        return None if r is None else [r[0], r[1]]
    return [[n.name, n.type, n.element, rng(n.versions, n.name), rng(n.nullable, n.name + " nullable"),
             n.tag if n.tagged else None, rng(n.tagged, n.name + " tagged"), fact_nodes(n.children)]
            for n in nodes]


def cmd_facts(workdir: Path, json_dirs: list[str], out_path: Path) -> None:
    """What Kafka's JSON message definitions say, for the test that compares the table with
    them: the versions Kafka has of each message and their fields (see the module docstring)."""
    kp_dir = workdir / "kafka-python" / "ex" / "kafka" / "protocol" / "schemas" / "resources"
    defs = load_json_dir(str(kp_dir))
    sources = [f"kafka-python {KAFKA_PYTHON}'s bundled Kafka definitions"]
    for d in json_dirs:
        for k, v in load_json_dir(d).items():
            defs.setdefault(k, {}).update(v)
        sources.append(f"the Kafka definitions in {Path(d).name}")
    facts: dict[str, Any] = {}
    for key, dirs in sorted(defs.items()):
        if set(dirs) != {"request", "response"}:
            continue
        vr = vrange(dirs["request"]["validVersions"])
        assert vr is not None
        pv: PerVersion = {}
        for v in range(vr[0], vr[1] + 1):
            pv[v] = {}
            for direction, j in dirs.items():
                common = {c["name"]: c["fields"] for c in j.get("commonStructs", [])}
                pv[v][direction] = (inr(v, vrange(j.get("flexibleVersions"))), vf_from_json(j["fields"], v, common))
        if key in KAFKA_4_4:
            KAFKA_4_4[key](pv)
        versions = sorted(pv)
        flex = [v for v in versions if pv[v]["request"][0]]
        entry: dict[str, Any] = {"name": dirs["request"]["name"].removesuffix("Request"),
                                 "versions": [versions[0], versions[-1]], "flexible_from": min(flex) if flex else None,
                                 "listeners": dirs["request"].get("listeners", [])}
        for direction in ("request", "response"):
            nodes: list[Node] = []
            for v in versions:
                merge_version(nodes, pv[v][direction][1], v)
            entry[direction] = fact_nodes(nodes)
        facts[str(key)] = entry
    doc = {"about": "Kafka's message definitions as facts (tools/gen_schema.py facts): "
                    + ", ".join(sources) + ", with KAFKA_4_4 applied; per API key the versions Kafka has, "
                    "the first flexible one, the listeners and the fields as [name, type, element, "
                    "versions, nullable versions, tag, tagged versions, children]",
           "apis": facts}
    out_path.parent.mkdir(parents=True, exist_ok=True)
    # one API a line: a refresh reads as a diff of the APIs that changed
    lines = [f'{{"about": {json.dumps(doc["about"])},', ' "apis": {']
    items = list(facts.items())
    for i, (k, e) in enumerate(items):
        lines.append(f'  "{k}": {json.dumps(e, separators=(",", ":"))}' + ("," if i < len(items) - 1 else ""))
    lines.append("}}")
    out_path.write_text("\n".join(lines) + "\n")
    print(f"wrote {out_path}: {len(facts)} APIs")


def _sig_plain(vfs: list[dict[str, Any]]) -> list[Any]:
    return [(f["name"], f["type"], f["element"], f["nullable"], f["tag"], _sig_plain(f["fields"]))
            for f in vfs]


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "_dump-kio":
        cmd_dump_kio(sys.argv[2], sys.argv[3])
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sp = ap.add_subparsers(dest="cmd", required=True)
    f = sp.add_parser("fetch")
    f.add_argument("workdir", type=Path)
    g = sp.add_parser("generate")
    g.add_argument("workdir", type=Path)
    g.add_argument("--json", action="append", default=[], help="extra dir of Kafka JSON definitions")
    g.add_argument("-o", "--out", type=Path, default=ROOT / "dissectors" / "schema_data.py")
    fa = sp.add_parser("facts")
    fa.add_argument("workdir", type=Path)
    fa.add_argument("--json", action="append", default=[], help="dir of Kafka JSON definitions (wins)")
    fa.add_argument("-o", "--out", type=Path, default=ROOT / "tests" / "data" / "kafka_messages.json")
    a = ap.parse_args()
    if a.cmd == "fetch":
        cmd_fetch(a.workdir)
    elif a.cmd == "facts":
        cmd_facts(a.workdir, a.json, a.out)
    else:
        cmd_generate(a.workdir, a.json, a.out)


if __name__ == "__main__":
    main()
