"""Fast parsing of Kafka request and response headers, without building Field trees.

Pairing, framing and protocol detection run this on every frame, so it stays a
few struct calls. The full annotated header is produced by ``dissectors.kafka``.

Header versions (see ``dissectors.schema``): request header v0 (api_key,
api_version, correlation_id) is used only by ControlledShutdown v0; v1 adds the
nullable client_id string; v2 (flexible versions) adds tagged fields. Response
header v0 is the correlation_id; v1 adds tagged fields; ApiVersions responses
always use v0.
"""
from __future__ import annotations

import struct
from typing import Literal, NamedTuple, overload

from dissectors.schema import APIS, ApiDef, request_header_version, response_header_version

_HDR = struct.Struct(">hhi")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

# api_keys we accept as plausible even if the schema table lacks them
MAX_PLAUSIBLE_API_KEY = 127
MAX_PLAUSIBLE_VERSION = 40
# a known API's version at most this far above the newest the schema knows is plausible
MAX_NEWER_PLAUSIBLE = 8


class RequestHeader(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    header_len: int        # bytes from the frame start to the first body byte
    header_version: int


def read_uvarint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """Unsigned varint at ``pos``: (value, next position). Raises ValueError when cut or too long."""
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise ValueError("varint runs past the end")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


def skip_tagged_fields(data: bytes, pos: int, end: int) -> int:
    """Skip a tagged-field section; return the position after it. Raises ValueError when malformed."""
    count, pos = read_uvarint(data, pos, end)
    if count > end - pos:
        raise ValueError("tagged field count exceeds frame")
    for _ in range(count):
        _tag, pos = read_uvarint(data, pos, end)
        size, pos = read_uvarint(data, pos, end)
        if size > end - pos:
            raise ValueError("tagged field size exceeds frame")
        pos += size
    return pos


_new = tuple.__new__
_HDR_SLEN = struct.Struct(">hhih")        # the v1+ header up to the client_id length
# api_key << 16 | api_version -> request header version. (A negative version gives a key
# equal to itself whatever the api_key, which is fine: its header is taken as v1 for all.)
_HV: dict[int, int] = {}


def _header_version(api_key: int, api_version: int) -> int:
    """``request_header_version`` through a small cache (every request header asks); 1 for
    a negative version (a header with a client_id, at least)."""
    k = api_key << 16 | api_version
    hv = _HV.get(k)
    if hv is None:
        if len(_HV) >= 4096:              # only garbage reaches this many pairs
            _HV.clear()
        hv = _HV[k] = request_header_version(api_key, api_version) if api_version >= 0 else 1
    return hv


def parse_request_header(data: bytes, partial: bool = False) -> RequestHeader | None:
    """The request header of a frame, or None when it cannot be one (too short, bad lengths).

    With ``partial`` the bytes are a frame cut short in the capture (snaplen): a
    client_id or tagged-field section running past the end is kept as far as it goes.

    A header parsed from the first bytes of a frame (without ``partial``) is the header
    of the whole frame too: nothing past ``header_len`` is read, and more bytes only
    widen the bounds checked. So a header parsed from a framer's peek can be kept.
    """
    return request_header(data, partial, False)


# with ``check`` (the default) the result is a header or a verdict, never None; without it a
# header or None, never a bool: the overloads say so to the type checker
@overload
def request_header(data: bytes, partial: bool = True, check: Literal[True] = True) -> RequestHeader | bool: ...
@overload
def request_header(data: bytes, partial: bool, check: Literal[False]) -> RequestHeader | None: ...
def request_header(data: bytes, partial: bool = True, check: bool = True) -> RequestHeader | bool | None:
    """``parse_request_header(data, partial)`` without ``check``; with it (the defaults: the
    framer's check of a peek, called as ``request_header(data)``, no call of its own),
    ``plausible_request(data, prefix=partial)`` (see both): the header if plausible and
    parsed whole, True if judged on a cut client_id, else False."""
    # once per request frame (the framer's check): the common v1/v2 header takes the
    # fewest steps, and the plausibility check is made on the way (no second call)
    n = len(data)
    if n < 10:
        if n < 8:
            return False if check else None
        api_key, api_version, correlation_id = _HDR.unpack_from(data, 0)
        if _header_version(api_key, api_version) != 0 or (check and not _api_plausible(api_key, api_version)):
            return False if check else None      # (only a v0 header fits)
        return _new(RequestHeader, (api_key, api_version, correlation_id, None, 8, 0))
    api_key, api_version, correlation_id, slen = _HDR_SLEN.unpack_from(data, 0)
    k = api_key << 16 | api_version
    if check:
        hv = _CHECKED.get(k)    # _checked_version's cache, read inline
        if hv is None:
            hv = _checked_version(api_key, api_version)
        if hv < 0:
            return False
    else:
        hv = _HV.get(k)     # _header_version's cache, read inline
        if hv is None:
            hv = _header_version(api_key, api_version)
    if hv == 0:
        return _new(RequestHeader, (api_key, api_version, correlation_id, None, 8, 0))
    client_id: str | None
    if slen < 0:
        if slen != -1:
            return False if check else None
        client_id = None
        pos = 10
    else:
        pos = 10 + slen
        if pos > n:
            if not partial:
                return False if check else None
            client_id = data[10:].decode("utf-8", "replace")
            if check:       # judged on the part of the client_id that is there
                return slen <= 2048 and (not client_id or client_id.isprintable())
            return _new(RequestHeader, (api_key, api_version, correlation_id, client_id, n, hv))
        client_id = data[10:pos].decode("utf-8", "replace")
        if check and client_id and not client_id.isprintable():
            return False
    if hv == 2:
        if pos < n and data[pos] == 0:
            pos += 1                      # no tagged fields: the common case
        else:
            try:
                pos = skip_tagged_fields(data, pos, n)
            except ValueError:
                if not partial:
                    return False if check else None
                if check:   # a cut section: judged on the client_id (printable, checked above)
                    return 0 <= slen <= 2048
                pos = n
    return _new(RequestHeader, (api_key, api_version, correlation_id, client_id, pos, hv))


def parse_response_header(data: bytes, api_key: int | None, api_version: int | None) -> tuple[int, int] | None:
    """(correlation_id, header_len) of a response frame, or None when too short or malformed.

    Without a known request (an orphan response), the header is taken as v0.
    """
    n = len(data)
    if n < 4:
        return None
    (correlation_id,) = _I32.unpack_from(data, 0)
    if api_key is None or api_version is None:
        return correlation_id, 4
    if response_header_version(api_key, api_version) == 1:
        try:
            return correlation_id, skip_tagged_fields(data, 4, n)
        except ValueError:
            return None
    return correlation_id, 4


def response_correlation_id(data: bytes) -> int | None:
    if len(data) < 4:
        return None
    return _I32.unpack_from(data, 0)[0]


# api_key << 16 | api_version -> plausible pair (negative versions, whose keys are the
# version whatever the api_key, are all implausible)
_API_OK: dict[int, bool] = {}


def _api_plausible(api_key: int, api_version: int) -> bool:
    """A known API key (or a small one when the schema is empty) and a sane version (cached)."""
    k = api_key << 16 | api_version
    ok = _API_OK.get(k)
    if ok is None:
        api = APIS.get(api_key)
        if api is None and (APIS or not 0 <= api_key <= MAX_PLAUSIBLE_API_KEY):
            ok = False
        elif not 0 <= api_version <= MAX_PLAUSIBLE_VERSION:
            ok = False
        else:
            ok = api is None or api_version <= api.max_version + MAX_NEWER_PLAUSIBLE
        if len(_API_OK) >= 4096:
            _API_OK.clear()
        _API_OK[k] = ok
    return ok


# api_key << 16 | api_version -> its request header version if the pair is plausible, else -1:
# what the check of every request frame asks, in one lookup
_CHECKED: dict[int, int] = {}


def _checked_version(api_key: int, api_version: int) -> int:
    """``_header_version`` of a plausible API key and version (``_api_plausible``), else -1 (cached)."""
    hv = _header_version(api_key, api_version) if _api_plausible(api_key, api_version) else -1
    if len(_CHECKED) >= 4096:
        _CHECKED.clear()
    _CHECKED[api_key << 16 | api_version] = hv
    return hv


def sane_request(data: bytes, size: int) -> RequestHeader | None:
    """A request header of any API key and version (the first bytes of a frame of ``size``
    bytes, ``data`` maybe fewer): what a frame at a known boundary of a stream in sync must
    start with to count as one although ``plausible_request`` rejects its key or version
    (an API or version newer than the schema). A key and version that are not negative
    and a client_id that is null, or fits the frame and is printable as far as it goes; its
    tagged-field section (a guess for such a version) is taken as far as it parses. Else None."""
    if len(data) >= 10 and _I16.unpack_from(data, 8)[0] > size - 10:
        return None
    h = request_header(data, True, False)
    if h is None or h.__class__ is not RequestHeader:
        return None
    if h.api_key < 0 or h.api_version < 0 or (h.client_id and not h.client_id.isprintable()):
        return None
    return h


def plausible_request(data: bytes, prefix: bool = False) -> RequestHeader | bool:
    """Could these frame bytes (after the size prefix) be a 0.8+ request?

    Checks: a known API key (or a small one when the schema does not know it), a
    version in a sane range, and a client_id that fits and is printable. With
    ``prefix`` the bytes are only the start of the frame (the framer's peek): a
    client_id running past them is judged on the part that is there.

    A plausible header that parsed whole is returned (a non-empty tuple, so truthy):
    it is ``parse_request_header`` of the whole frame as well, which the caller need
    not repeat. A header judged on a cut client_id gives True; an implausible one False.
    """
    return request_header(data, prefix, True)


def api_table(apis: dict[int, ApiDef] | None = None) -> list[tuple[int, int, list[int]]]:
    """What the core's framing and pairing need of the schema (``apis``, else ``APIS``),
    handed to it at start-up (``analyzer._core.Stream(apis=...)``): each known API key with
    its newest version and the request header version of each version up to that one (a
    newer version's header is the newest one's: ``request_header_version`` clamps)."""
    apis = APIS if apis is None else apis
    return [(key, api.max_version, [request_header_version(key, v) for v in range(api.max_version + 1)])
            for key, api in sorted(apis.items())]
