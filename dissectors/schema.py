"""The declarative description of every Kafka API: types and lookups.

The data lives in ``schema_data.py`` (written once by ``tools/gen_schema.py`` from
the protocol's facts, then owned and edited by us). This module defines its shape
and the lookups the decoder and the CLI use.

Naming: field names are Kafka's field names in snake_case (``ErrorCode`` ->
``error_code``, ``TopicId`` -> ``topic_id``); struct names keep Kafka's CamelCase
(``TopicProduceData``); API names are exactly Kafka's (``Produce``, ``ApiVersions``).

Versions are inclusive ranges ``(lo, hi)``; ``hi == ANY`` means "and every later
version" (Kafka's ``"3+"``).
"""
from __future__ import annotations

from typing import NamedTuple

ANY = 0x7FFF  # open upper bound of a version range

# primitive wire types the decoder understands
PRIMITIVES = frozenset({
    "int8", "int16", "int32", "int64", "uint16", "uint32", "varint", "varlong",
    "float64", "bool", "uuid", "string", "bytes", "records",
})


class FieldDef(NamedTuple):
    name: str                              # snake_case
    type: str                              # a PRIMITIVES member, "struct" or "array"
    versions: tuple[int, int]              # versions in which the field is present
    nullable: tuple[int, int] | None = None
    tag: int | None = None                 # tagged-field tag, if it is tagged
    tagged: tuple[int, int] | None = None  # versions in which it is a tagged field
    struct: str | None = None              # struct name (struct, or array of struct)
    element: str | None = None             # array element: a primitive type, or "struct"
    fields: tuple[FieldDef, ...] = ()      # children of a struct / array of struct
    meaning: str | None = None             # annotation key, see dissectors.annotate
    ignorable: bool = False


class ApiDef(NamedTuple):
    key: int
    name: str
    min_version: int
    max_version: int
    flexible_from: int | None              # first flexible version; None: never flexible
    request: tuple[FieldDef, ...]
    response: tuple[FieldDef, ...]
    kafka4_versions: tuple[int, int] | None  # what Kafka 4.x still serves; None: removed in 4.0 (KIP-896)
    listeners: tuple[str, ...] = ()        # "broker", "controller", "zkBroker" ...


def in_range(version: int, r: tuple[int, int] | None) -> bool:
    return r is not None and r[0] <= version <= r[1]


def is_flexible(api: ApiDef, version: int) -> bool:
    return api.flexible_from is not None and version >= api.flexible_from


def request_header_version(api_key: int, api_version: int) -> int:
    """0 for ControlledShutdown v0, 2 for flexible versions, 1 otherwise."""
    if api_key == 7 and api_version == 0:
        return 0
    api = APIS.get(api_key)
    if api is not None and is_flexible(api, min(api_version, api.max_version)):
        return 2
    return 1


def response_header_version(api_key: int, api_version: int) -> int:
    """ApiVersions responses always use header v0; flexible versions use v1."""
    if api_key == 18:
        return 0
    api = APIS.get(api_key)
    if api is not None and is_flexible(api, min(api_version, api.max_version)):
        return 1
    return 0


def api_name(api_key: int | None) -> str:
    api = APIS.get(api_key) if api_key is not None else None
    return api.name if api else f"Unknown({api_key})"


from dissectors.schema_data import APIS  # noqa: E402  (data module imports FieldDef/ApiDef)

API_BY_NAME: dict[str, ApiDef] = {a.name.lower(): a for a in APIS.values()}
