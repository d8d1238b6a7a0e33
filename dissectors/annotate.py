"""Annotations by ``FieldDef.meaning`` (the vocabulary is in helpers' MEANINGS table).

``annotator(meaning)`` gives the function the compiled decoder calls right after it
decodes a field with that meaning: ``fn(field, state, siblings)`` where ``state`` is
the decoder's per-message State (``.ctx``, ``.api_key``) and ``siblings`` the
fields decoded so far at the same level (the field itself is the last one).
Nested payloads (consumer protocol, SASL) are decoded by ``dissectors.kafka`` after
the message, since they need message-level facts (protocol_type, mechanism).
"""
from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from dissectors.errors import ERRORS, error_name
from dissectors.field import Field

Annotator = Callable[[Field, Any, list], None]


def iso_ms(ms: int) -> str:
    """An epoch-millisecond timestamp as ISO-8601 UTC (``2024-05-01T12:00:00.000Z``)."""
    try:
        dt = datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        return f"out of range ({ms} ms)"
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def crc_verdict(stored: int, computed: int) -> str:
    """The note of a CRC field: the verdict beside the stored value in hex (and the computed
    one when they differ), as ``crc valid (0x1a2b3c4d)``."""
    if stored == computed:
        return f"crc valid (0x{stored:08x})"
    return f"crc INVALID (0x{stored:08x}), computed 0x{computed:08x}"


def redacted(n: int) -> str:
    return f"<redacted {n} bytes>"


class NoteTable(dict):
    """value -> the one note a field with that value gets; values not in the table
    get ``fallback(value)`` (not stored). The compiled decoder looks these notes up
    inline (``table[v]``) for fixed-size fields, saving the annotator calls."""

    def __init__(self, names: dict[Any, str], fallback: Callable[[Any], str]) -> None:
        super().__init__(names)
        self.fallback = fallback

    def __missing__(self, value: Any) -> str:
        return self.fallback(value)


def _enum_table(names: dict[int, str]) -> NoteTable:
    return NoteTable(names, lambda v: f"unknown ({v})")


def _enum(table: NoteTable) -> Annotator:
    def ann(f: Field, st: Any, siblings: list) -> None:
        f.note(table[f.value])
    return ann


# error codes: named for zero too (``NONE``, as tshark's "No Error (0)"); the ``extra``
# kafka.error_codes collects only when non-zero
ERROR_NOTES = NoteTable(ERRORS, error_name)


def _error_code(f: Field, st: Any, siblings: list) -> None:
    f.note(ERROR_NOTES[f.value])
    if f.value:
        f.extra = {"error_code": f.value}  # what kafka.error_codes collects


def _api_name(key: Any) -> str:
    from dissectors.schema import api_name  # schema's data module is loaded after this one
    return api_name(key)


class _ApiNotes(NoteTable):
    """API names, filled on first use of each key (the schema data cannot be read
    while this module loads); the answer for a key never changes."""

    def __missing__(self, value: Any) -> str:
        name = self.fallback(value)
        if type(value) is int and -0x8000 <= value < 0x8000:  # int16 keys: bounded
            self[value] = name
        return name


API_NOTES = _ApiNotes({}, _api_name)


def _api_key(f: Field, st: Any, siblings: list) -> None:
    f.note(API_NOTES[f.value])


def _timestamp(f: Field, st: Any, siblings: list) -> None:
    v = f.value
    if v == -1:
        f.note("none")
    elif isinstance(v, int):
        f.note(iso_ms(v))


OFFSET_SPECS = {-1: "latest", -2: "earliest", -3: "max_timestamp", -4: "earliest_local",
                -5: "latest_tiered"}


def _offset_spec(f: Field, st: Any, siblings: list) -> None:
    v = f.value
    name = OFFSET_SPECS.get(v)
    if name is not None:
        f.note(name)
    elif isinstance(v, int) and v >= 0:
        f.note(iso_ms(v))
    else:
        f.note(f"unknown offset spec ({v})")


ACKS = {0: "none", 1: "leader", -1: "all"}
ISOLATION = {0: "READ_UNCOMMITTED", 1: "READ_COMMITTED"}
ACL_RESOURCE = {0: "UNKNOWN", 1: "ANY", 2: "TOPIC", 3: "GROUP", 4: "CLUSTER", 5: "TRANSACTIONAL_ID",
                6: "DELEGATION_TOKEN", 7: "USER"}
CONFIG_RESOURCE = {0: "UNKNOWN", 2: "TOPIC", 4: "BROKER", 8: "BROKER_LOGGER", 16: "CLIENT_METRICS",
                   32: "GROUP"}
CONFIG_RESOURCE_APIS = frozenset({32, 33, 44, 74})  # Describe/AlterConfigs, IncrementalAlterConfigs, ListConfigResources
PATTERN = {0: "UNKNOWN", 1: "ANY", 2: "MATCH", 3: "LITERAL", 4: "PREFIXED"}
ACL_OPERATION = {0: "UNKNOWN", 1: "ANY", 2: "ALL", 3: "READ", 4: "WRITE", 5: "CREATE", 6: "DELETE",
                 7: "ALTER", 8: "DESCRIBE", 9: "CLUSTER_ACTION", 10: "DESCRIBE_CONFIGS",
                 11: "ALTER_CONFIGS", 12: "IDEMPOTENT_WRITE", 13: "CREATE_TOKENS", 14: "DESCRIBE_TOKENS",
                 15: "TWO_PHASE_COMMIT"}
ACL_PERMISSION = {0: "UNKNOWN", 1: "ANY", 2: "DENY", 3: "ALLOW"}
CONFIG_SOURCE = {0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG",
                 3: "DYNAMIC_DEFAULT_BROKER_CONFIG", 4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG",
                 6: "DYNAMIC_BROKER_LOGGER_CONFIG", 7: "CLIENT_METRICS_CONFIG", 8: "GROUP_CONFIG"}
COORDINATOR = {0: "GROUP", 1: "TRANSACTION", 2: "SHARE"}

_acl_resource = _enum(_enum_table(ACL_RESOURCE))
_config_resource = _enum(_enum_table(CONFIG_RESOURCE))


def _resource_type(f: Field, st: Any, siblings: list) -> None:
    if getattr(st, "api_key", None) in CONFIG_RESOURCE_APIS:
        _config_resource(f, st, siblings)
    else:
        _acl_resource(f, st, siblings)


ZERO_UUID = "00000000-0000-0000-0000-000000000000"


def topic_note(topic_id: str | None, names: dict[str, str]) -> str:
    if topic_id is None or topic_id == ZERO_UUID:
        return "no topic id"
    name = names.get(topic_id)
    return f"topic {name}" if name is not None else "unresolved"


def _topic_id(f: Field, st: Any, siblings: list) -> None:
    f.note(topic_note(f.value, st.ctx.topic_names))


def _secret(f: Field, st: Any, siblings: list) -> None:
    v = f.value
    if v is None or st.ctx.presentation.show_secrets:
        return
    n = len(v.encode()) if isinstance(v, str) else len(v)
    f.value = redacted(n)
    f.note("secret redacted (--show-secrets reveals it)")


SECRET_WORDS = ("password", "secret", "jaas", "token", "credential", "private.key", "keystore.key",
                "truststore.certificates", "apikey", "api.key")


def looks_secret(config_name: str | None) -> bool:
    if not config_name:
        return False
    low = config_name.lower()
    return any(w in low for w in SECRET_WORDS)


def _config_value(f: Field, st: Any, siblings: list) -> None:
    if f.value is None or st.ctx.presentation.show_secrets:
        return
    name = None
    for s in siblings:
        if s is not f and s.type == "string" and s.name in ("name", "config_name", "key"):
            name = s.value
    if looks_secret(name):
        _secret(f, st, siblings)


# meanings whose annotation is exactly one note looked up from the value
_NOTE_TABLES: dict[str, NoteTable] = {
    "api_key": API_NOTES,
    "acks": _enum_table(ACKS),
    "isolation_level": _enum_table(ISOLATION),
    "pattern_type": _enum_table(PATTERN),
    "acl_operation": _enum_table(ACL_OPERATION),
    "acl_permission": _enum_table(ACL_PERMISSION),
    "config_source": _enum_table(CONFIG_SOURCE),
    "coordinator_type": _enum_table(COORDINATOR),
}

_ANNOTATORS: dict[str, Annotator] = {
    "error_code": _error_code,
    "timestamp_ms": _timestamp,
    "offset_spec": _offset_spec,
    "resource_type": _resource_type,
    "topic_id": _topic_id,
    "secret": _secret,
    "config_value": _config_value,
}
_ANNOTATORS["api_key"] = _api_key
for _meaning, _table in _NOTE_TABLES.items():
    if _meaning not in _ANNOTATORS:
        _ANNOTATORS[_meaning] = _enum(_table)


def note_table(meaning: str | None) -> NoteTable | None:
    """The NoteTable of a meaning annotated by one note looked up from the value
    (its ``annotator`` does exactly ``f.note(table[f.value])``), else None."""
    return _NOTE_TABLES.get(meaning) if meaning is not None else None


def annotator(meaning: str | None) -> Annotator | None:
    """The annotating function for a FieldDef meaning, or None (no annotation)."""
    if meaning is None:
        return None
    return _ANNOTATORS.get(meaning)
