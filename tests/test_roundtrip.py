"""Round trips against independent encoders: kio 0.6.2 and kafka-python 3.0.12.

For every (api_key, version, direction) an encoder can write, hypothesis builds a
few random messages, the encoder writes the body bytes, our generic decoder reads
them back, and every field value is compared (regular fields in wire order, tagged
fields by name). A decode must use all bytes and carry no ``malformed`` note.

kio builds its messages itself (its dataclasses register hypothesis strategies);
for kafka-python we draw values from its own field definitions.

Examples per case are few and shrinking is off, so the file stays well under 90 s.
"""
from __future__ import annotations

import dataclasses
import datetime
import enum
import io
import struct
import uuid
from typing import Any

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from dissectors.context import DecodeContext, Presentation  # noqa: E402
from dissectors.decoder import decode_body  # noqa: E402
from dissectors.field import Field  # noqa: E402
from dissectors.schema import APIS  # noqa: E402

SETTINGS = dict(deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck),
                phases=[Phase.explicit, Phase.generate])

ZERO_UUID = "00000000-0000-0000-0000-000000000000"
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)

# (api_key, version, request) where the peer's definition differs from Kafka 4.x's on purpose
KIO_SKIP = {
    # early-access share-group API: Kafka 4.0 added leader_epoch to v0 without a version bump
    (87, 0, False): "ReadShareGroupStateSummary v0 changed between Kafka 3.9 and 4.0",
}
# field names kio spells differently (Python keywords, KRaft, 4.x renames)
NAME_ALIASES = {("type_", "type"), ("id_", "id"), ("is_k_raft_controller", "is_kraft_controller"),
                ("k_raft_version_feature", "kraft_version_feature"), ("candidate_epoch", "replica_epoch"),
                ("candidate_id", "replica_id"), ("candidate_directory_id", "replica_directory_id"),
                ("client_metrics_resources", "config_resources"), ("name", "resource_name"),
                ("generation_id", "generation_id_or_member_epoch"),                # Kafka 4.4's renames
                ("acceptable_recovery_lag", "acceptable_recovery_lag_legacy")}


def _ctx() -> DecodeContext:
    # secrets shown so values compare; records kept as bytes (random bytes are not batches)
    return DecodeContext(presentation=Presentation(show_secrets=True, decode_records=False))


def _decode(api_key: int, version: int, request: bool, data: bytes) -> Field:
    ctx = _ctx()
    body = decode_body(APIS[api_key], version, request, data, 0, len(data), ctx)
    bad = [f for f in body.walk() if f.is_malformed]
    assert not bad, f"malformed: {bad[0]!r}"
    assert ctx.counts.trailing == 0 and body.length == len(data)
    return body


def _split(children: list[Field] | None) -> tuple[list[Field], dict[str, Field], list[str]]:
    regular, tagged, unknown = [], {}, []
    for c in children or ():
        if c.name == "tagged_fields":
            for t in c.children or ():
                if t.name.startswith("tag_"):
                    unknown.append(t.name)
                else:
                    tagged[t.name] = t
        else:
            regular.append(c)
    return regular, tagged, unknown


# ---------------------------------------------------------------------------
# kio
# ---------------------------------------------------------------------------

kio_index = pytest.importorskip("kio.schema.index")
from pkgutil import resolve_name  # noqa: E402

from kio.serial import entity_writer  # noqa: E402
from kio.static.constants import EntityType  # noqa: E402
from kio.static.primitive import Records  # noqa: E402

st.register_type_strategy(Records, st.binary(max_size=12).map(Records))


def _kio_norm(v: Any, ours: Field) -> Any:
    if isinstance(v, enum.Enum):
        return v.value
    if isinstance(v, datetime.timedelta):
        return v // datetime.timedelta(milliseconds=1)
    if isinstance(v, datetime.datetime):
        return (v - EPOCH) // datetime.timedelta(milliseconds=1)
    if isinstance(v, uuid.UUID):
        return str(v)
    if v is None and ours.type == "uuid":
        return ZERO_UUID
    if v is None and ours.type in ("int64", "int32"):
        return -1  # kio models "-1 = none" timestamps as None
    return v


def _names_match(kio_name: str, ours: str) -> bool:
    # kio drops the unit suffix of durations/timestamps it models as timedelta/datetime
    return kio_name == ours or ours == kio_name + "_ms" or (kio_name, ours) in NAME_ALIASES


def _kio_compare(obj: Any, children: list[Field] | None, path: str) -> None:
    regular_k, tagged_k = [], {}
    for fd in dataclasses.fields(obj):
        if "tag" in fd.metadata:
            tagged_k[fd.name] = getattr(obj, fd.name)
        else:
            regular_k.append((fd.name, getattr(obj, fd.name)))
    regular, tagged, unknown = _split(children)
    assert not unknown, f"{path}: tags we do not know: {unknown}"
    assert len(regular) == len(regular_k), f"{path}: ours {[c.name for c in regular]} kio {regular_k}"
    for (name, v), c in zip(regular_k, regular, strict=True):
        assert _names_match(name, c.name), f"{path}: field {c.name!r} where kio has {name!r}"
        _kio_value(v, c, f"{path}.{name}")
    for name, c in tagged.items():
        kname = next((k for k in tagged_k if _names_match(k, name)), None)
        assert kname is not None, f"{path}: tagged {name} unknown to kio"
        _kio_value(tagged_k[kname], c, f"{path}.{name}")


def _kio_value(v: Any, c: Field, path: str) -> None:
    if isinstance(v, tuple):
        assert c.type == "array" and c.value == len(v), f"{path}: {c!r} vs {len(v)} items"
        for i, (x, e) in enumerate(zip(v, c.children or [], strict=True)):
            if dataclasses.is_dataclass(x):
                _kio_compare(x, e.children, f"{path}[{i}]")
            else:
                assert _kio_norm(x, e) == e.value, f"{path}[{i}]: ours {e.value!r} kio {x!r}"
        return
    if dataclasses.is_dataclass(v):
        _kio_compare(v, c.children, path)
        return
    if v is None and c.type == "array":
        assert c.value is None, path
        return
    want = _kio_norm(v, c)
    if isinstance(want, float) and want != want:
        assert c.value != c.value, path
        return
    assert want == c.value, f"{path}: ours {c.value!r} kio {want!r}"


def _kio_cases() -> list[tuple[int, int, bool]]:
    out = []
    for key, name in kio_index.api_key_map.items():
        for ver, m in kio_index.schema_name_map[name].items():
            for et, req in ((EntityType.request, True), (EntityType.response, False)):
                if et in m and key in APIS:
                    out.append((key, ver, req))
    return out


KIO_CASES = _kio_cases()


def _kio_class(key: int, ver: int, req: bool) -> Any:
    m = kio_index.schema_name_map[kio_index.api_key_map[key]][ver]
    return resolve_name(m[EntityType.request if req else EntityType.response])


def test_kio_covers_what_we_expect() -> None:
    assert len(KIO_CASES) > 600
    assert {k for k, _, _ in KIO_CASES} >= set(range(0, 70))


def _kio_group(keys: range) -> list[tuple[int, int, bool]]:
    return [c for c in KIO_CASES if c[0] in keys]


def _kio_check(key: int, ver: int, req: bool) -> Any:
    cls = _kio_class(key, ver, req)
    write = entity_writer(cls)
    # fewer examples for the big nested messages keeps the file fast
    n = 1 if key in (0, 1, 6, 73) else 2

    @settings(max_examples=n, **SETTINGS)
    @given(st.from_type(cls))
    def check(obj: Any) -> None:
        buf = io.BytesIO()
        write(buf, obj)
        body = _decode(key, ver, req, buf.getvalue())
        _kio_compare(obj, body.children, f"{key}v{ver}{'req' if req else 'resp'}")
    return check


@pytest.mark.parametrize("group", [range(0, 20), range(20, 45), range(45, 70), range(70, 200)],
                         ids=["keys0-19", "keys20-44", "keys45-69", "keys70+"])
def test_kio_round_trip(group: range) -> None:
    failures = []
    for key, ver, req in _kio_group(group):
        if (key, ver, req) in KIO_SKIP:
            continue
        try:
            _kio_check(key, ver, req)()
        except Exception as e:
            failures.append(f"{key} v{ver} {'request' if req else 'response'}: {str(e).splitlines()[0][:300]}")
    assert not failures, "\n".join(failures)


# ---------------------------------------------------------------------------
# kafka-python 3
# ---------------------------------------------------------------------------

kp = pytest.importorskip("kafka.protocol.api_message")
import kafka.protocol.admin  # noqa: E402,F401
import kafka.protocol.consumer  # noqa: E402,F401
import kafka.protocol.metadata  # noqa: E402,F401
import kafka.protocol.producer  # noqa: E402,F401
from kafka.protocol.schemas.fields.codecs import UUID as KpUUID  # noqa: E402
from kafka.protocol.schemas.fields.codecs import (  # noqa: E402
    BitField,
    Boolean,
    Bytes,
    Float64,
    Int8,
    Int16,
    Int32,
    Int64,
    String,
    UnsignedInt16,
)

_INTS = {Int8: 8, Int16: 16, Int32: 32, Int64: 64}
_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=8)


def _kp_value(field: Any, version: int, element: bool = False) -> st.SearchStrategy:
    """A strategy for one kafka-python field's value in ``version``."""
    # an array's nullableVersions is about the array, not its elements
    nullable = field.nullable_for_version_q(version) and not element
    if field.is_struct_array() or field.is_array():
        inner = field.array_of
        el = _kp_struct(inner, version) if field.is_struct_array() else _kp_value(inner, version, True)
        s = st.lists(el, max_size=3)
        return st.one_of(st.none(), s) if nullable else s
    if field.is_struct():
        s = _kp_struct(field, version)
        return st.one_of(st.none(), s) if nullable else s
    t = field._type
    if t in _INTS:
        b = _INTS[t]
        s = st.integers(-(2 ** (b - 1)), 2 ** (b - 1) - 1)
    elif t is UnsignedInt16:
        s = st.integers(0, 65535)
    elif t is Boolean:
        s = st.booleans()
    elif t is Float64:
        s = st.floats(allow_nan=False)
    elif t is KpUUID:
        s = st.uuids()
    elif t is BitField:
        s = st.one_of(st.none(), st.sets(st.integers(0, 30), max_size=4))
    elif t is Bytes:
        s = st.binary(max_size=10)
    elif isinstance(t, String):
        s = _text
    else:  # pragma: no cover - a type kafka-python added later
        raise AssertionError(f"unhandled kafka-python type {t!r}")
    return st.one_of(st.none(), s) if nullable else s


def _kp_struct(struct_field: Any, version: int) -> st.SearchStrategy:
    """A strategy for a dict of (name -> value) for the fields present in ``version``."""
    parts = {}
    for f in struct_field._fields:
        if f.for_version_q(version):
            parts[f.name] = _kp_value(f, version)
    return st.fixed_dictionaries(parts)


def _kp_build(struct_field: Any, values: dict, version: int, top: Any = None) -> Any:
    kwargs = {}
    for f in struct_field._fields:
        if f.name not in values:
            continue
        v = values[f.name]
        if v is not None and f.is_struct_array():
            v = [_kp_build(f.array_of, x, version) for x in v]
        elif v is not None and f.is_struct():
            v = _kp_build(f, v, version)
        kwargs[f.name] = v
    cls = top if top is not None else struct_field.data_class
    return cls(version=version, **kwargs)


def _kp_norm(v: Any, field: Any) -> Any:
    t = getattr(field, "_type", None)
    if t is KpUUID:
        return ZERO_UUID if v is None else str(v)
    if t is BitField:
        bits = {31} if v is None else v
        n = sum(1 << b for b in bits)
        return n - (1 << 32) if n >= 1 << 31 else n
    return v


def _kp_names_match(kp_name: str, ours: str) -> bool:
    # kafka-python renames the authorized-operations bitfields and splits "2PC" oddly; its
    # definitions predate Kafka 4.4's rename of TxnOffsetCommit's generation id
    return (kp_name == ours or (kp_name == "authorized_operations" and ours.endswith("_authorized_operations"))
            or (kp_name, ours) in (("enable2_pc", "enable_2pc"), ("generation_id", "generation_id_or_member_epoch")))


def _kp_compare(struct_field: Any, values: dict, children: list[Field] | None, version: int,
                flexible: bool, path: str) -> None:
    regular, tagged, unknown = _split(children)
    assert not unknown, f"{path}: tags we do not know: {unknown}"
    expect_regular = [f for f in struct_field._fields
                      if f.for_version_q(version) and not (flexible and f.tagged_field_q(version))]
    assert len(regular) == len(expect_regular) and all(
        _kp_names_match(f.name, c.name) for f, c in zip(expect_regular, regular, strict=True)), \
        f"{path}: ours {[c.name for c in regular]} kafka-python {[f.name for f in expect_regular]}"
    for f, c in zip(expect_regular, regular, strict=True):
        _kp_field(f, values[f.name], c, version, flexible, f"{path}.{f.name}")
    for name, c in tagged.items():
        f = next(x for x in struct_field._fields if x.name == name)
        _kp_field(f, values[name], c, version, flexible, f"{path}.{name}")


def _kp_field(f: Any, v: Any, c: Field, version: int, flexible: bool, path: str) -> None:
    if f.is_struct_array() or f.is_array():
        if v is None:
            assert c.value is None, path
            return
        assert c.type == "array" and c.value == len(v), f"{path}: {c!r} vs {len(v)}"
        for i, (x, e) in enumerate(zip(v, c.children or [], strict=True)):
            if f.is_struct_array():
                _kp_compare(f.array_of, x, e.children, version, flexible, f"{path}[{i}]")
            else:
                assert _kp_norm(x, f.array_of) == e.value, f"{path}[{i}]: ours {e.value!r} kp {x!r}"
        return
    if f.is_struct():
        if v is None:
            assert c.value is None and c.children is None, path
            return
        _kp_compare(f, v, c.children, version, flexible, path)
        return
    assert _kp_norm(v, f) == c.value, f"{path}: ours {c.value!r} kafka-python {v!r}"


def _kp_classes() -> list[Any]:
    def subs(c: Any) -> Any:
        for s in c.__subclasses__():
            yield s
            yield from subs(s)
    seen, out = set(), []
    for c in subs(kp.ApiMessage):
        if getattr(c, "_class_version", 1) is None and c._json and c not in seen:
            seen.add(c)
            out.append(c)
    return sorted(out, key=lambda c: (c.API_KEY, c.type))


KP_CLASSES = _kp_classes()


def test_kafka_python_covers_the_client_apis() -> None:
    keys = {c.API_KEY for c in KP_CLASSES}
    assert len(keys) >= 50 and {0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 18, 19, 36} <= keys


def _kp_check(cls: Any, key: int, ver: int, req: bool) -> Any:
    flexible = cls.flexible_version_q(ver)

    @settings(max_examples=3 if key not in (0, 1) else 2, **SETTINGS)
    @given(_kp_struct(cls._struct, ver))
    def check(values: dict) -> None:
        msg = _kp_build(cls._struct, values, ver, top=cls)
        data = bytes(msg.encode(version=ver))
        body = _decode(key, ver, req, data)
        _kp_compare(cls._struct, values, body.children, ver, flexible, f"{cls.__name__}v{ver}")
    return check


@pytest.mark.parametrize("half", [0, 1], ids=["first-half", "second-half"])
def test_kafka_python_round_trip(half: int) -> None:
    classes = KP_CLASSES[half::2]
    failures = []
    for cls in classes:
        key = cls.API_KEY
        req = cls.type == "request"
        api = APIS.get(key)
        assert api is not None, f"kafka-python knows API {key}, we do not"
        lo, hi = cls.valid_versions
        for ver in range(lo, hi + 1):
            try:
                _kp_check(cls, key, ver, req)()
            except Exception as e:
                failures.append(f"{cls.__name__} v{ver}: {str(e).splitlines()[0][:300]}")
    assert not failures, "\n".join(failures)


def test_kafka_python_header_and_framing_agree_with_ours() -> None:
    """A full framed request from kafka-python: header fields through dissectors.kafka."""
    from kafka.protocol.metadata import MetadataRequest

    from dissectors.kafka import decode_request
    msg = MetadataRequest(version=12, topics=None, allow_auto_topic_creation=False,
                          include_topic_authorized_operations=True)
    msg.with_header(correlation_id=42, client_id="kp3")
    framed = bytes(msg.encode(header=True, framed=True))
    (size,) = struct.unpack_from(">i", framed)
    t = decode_request(framed[4:], _ctx())
    assert size == len(framed) - 4 and not t.any_malformed()
    h = t.child("header")
    assert (h.get("api_key"), h.get("api_version"), h.get("correlation_id"), h.get("client_id")) == (3, 12, 42, "kp3")
    assert t.child("body").get("include_topic_authorized_operations") is True
