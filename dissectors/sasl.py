"""SASL tokens: PLAIN (RFC 4616), SCRAM (RFC 5802) and OAUTHBEARER (RFC 7628) framing.

The tokens travel in SaslAuthenticate ``auth_bytes`` (request and response) or, after
a SaslHandshake v0, as raw size-prefixed frames. ``decode_token`` splits one into
its parts with absolute offsets. Secrets (the PLAIN password, the SCRAM client
proof ``p=``, the OAUTHBEARER bearer token) are replaced by ``<redacted N bytes>``
unless ``ctx.presentation.show_secrets``; the returned Field then has ``extra["secret"] = True``
so the caller can redact the raw bytes that carry them too.

With no mechanism given, the token's shape decides (SCRAM messages and the
OAUTHBEARER ``auth=`` key are unambiguous; PLAIN is three NUL-separated parts).
"""
from __future__ import annotations

from dissectors.annotate import redacted
from dissectors.context import DecodeContext
from dissectors.field import Field

SCRAM_ATTRS = {
    "a": "authzid", "n": "username", "r": "nonce", "s": "salt", "i": "iterations",
    "c": "channel_binding", "p": "proof", "v": "server_signature", "e": "error", "m": "reserved",
}


def _text(b: bytes) -> str:
    return b.decode("utf-8", "replace")


def _secret_field(name: str, raw: bytes, offset: int, ctx: DecodeContext) -> Field:
    if ctx.presentation.show_secrets:
        return Field(name, "string", _text(raw), offset, len(raw))
    f = Field(name, "string", redacted(len(raw)), offset, len(raw))
    f.note("secret redacted (--show-secrets reveals it)")
    return f


def _scram_unescape(s: str) -> str:
    return s.replace("=2C", ",").replace("=3D", "=")


def _attrs(buf: bytes, start: int, end: int, ctx: DecodeContext, out: list[Field]) -> bool:
    """SCRAM ``k=v`` attributes separated by commas; returns whether a secret was seen."""
    secret = False
    pos = start
    while pos <= end:
        comma = buf.find(b",", pos, end)
        stop = end if comma < 0 else comma
        item = buf[pos:stop]
        if item:
            key = chr(item[0]) if item[0] < 0x80 else "?"
            name = SCRAM_ATTRS.get(key, f"ext_{key}")
            if len(item) >= 2 and item[1:2] == b"=":
                raw = item[2:]
                if key == "p":
                    secret = True
                    out.append(_secret_field(name, raw, pos + 2, ctx))
                else:
                    value: str | int = _text(raw)
                    if key in ("n", "a"):
                        value = _scram_unescape(str(value))
                    elif key == "i" and raw.isdigit():
                        value = int(raw)
                    out.append(Field(name, "int32" if isinstance(value, int) else "string",
                                     value, pos + 2, len(raw)))
            else:
                f = Field(f"item_{len(out)}", "string", _text(item), pos, len(item))
                out.append(f.note("not a SCRAM attribute"))
        if comma < 0:
            break
        pos = comma + 1
    return secret


def _gs2(buf: bytes, start: int, end: int, out: list[Field]) -> int | None:
    """A GS2 header (``n,,`` / ``y,,`` / ``p=cb,`` + optional ``a=authzid``): position after it."""
    c1 = buf.find(b",", start, end)
    if c1 < 0:
        return None
    flag = buf[start:c1]
    if not (flag in (b"n", b"y") or flag.startswith(b"p=")):
        return None
    c2 = buf.find(b",", c1 + 1, end)
    if c2 < 0:
        return None
    out.append(Field("gs2_cbind_flag", "string", _text(flag), start, c1 - start))
    authz = buf[c1 + 1:c2]
    if authz:
        value = _scram_unescape(_text(authz[2:])) if authz.startswith(b"a=") else _text(authz)
        out.append(Field("authzid", "string", value, c1 + 1 + (2 if authz.startswith(b"a=") else 0),
                         len(authz) - (2 if authz.startswith(b"a=") else 0)))
    return c2 + 1


def _plain(buf: bytes, start: int, end: int, ctx: DecodeContext, root: Field) -> None:
    z1 = buf.find(b"\x00", start, end)
    z2 = buf.find(b"\x00", z1 + 1, end) if z1 >= 0 else -1
    if z1 < 0 or z2 < 0:
        root.mark_malformed("PLAIN token needs authzid NUL username NUL password", ctx)
        return
    root.add(Field("authzid", "string", _text(buf[start:z1]), start, z1 - start))
    root.add(Field("username", "string", _text(buf[z1 + 1:z2]), z1 + 1, z2 - z1 - 1))
    root.add(_secret_field("password", buf[z2 + 1:end], z2 + 1, ctx))
    root.extra = {"secret": True}


def _oauth_client(buf: bytes, start: int, end: int, ctx: DecodeContext, root: Field) -> None:
    children: list[Field] = []
    pos = _gs2(buf, start, end, children)
    if pos is None:
        root.mark_malformed("OAUTHBEARER token without a GS2 header", ctx)
        return
    secret = False
    while pos < end:
        sep = buf.find(b"\x01", pos, end)
        stop = end if sep < 0 else sep
        kv = buf[pos:stop]
        if kv:
            eq = kv.find(b"=")
            key = _text(kv[:eq]) if eq >= 0 else _text(kv)
            raw = kv[eq + 1:] if eq >= 0 else b""
            vstart = pos + eq + 1
            if key == "auth":
                scheme, _, token = raw.partition(b" ")
                children.append(Field("auth_scheme", "string", _text(scheme), vstart, len(scheme)))
                if token:
                    children.append(_secret_field("token", token, vstart + len(scheme) + 1, ctx))
                    secret = True
            else:
                children.append(Field(key or "key", "string", _text(raw), vstart, len(raw)))
        if sep < 0:
            break
        pos = sep + 1
    root.children = children
    if secret:
        root.extra = {"secret": True}


def _kind(buf: bytes, start: int, end: int, mechanism: str | None, from_client: bool) -> str:
    data = buf[start:min(end, start + 4096)]
    mech = (mechanism or "").upper()
    if mech == "GSSAPI":
        return "raw"
    if from_client:
        if mech == "OAUTHBEARER" or (not mech and b"\x01auth=" in data):
            return "oauth" if b"\x01" in data or mech else "raw"
        if mech == "PLAIN":
            return "plain"
        if data.startswith(b"c=") and b",r=" in data:
            return "scram-client-final"
        if (data[:2] in (b"n,", b"y,") or data.startswith(b"p=")) and b"n=" in data and b"r=" in data:
            return "scram-client-first"
        if not mech and data.count(b"\x00") == 2:
            return "plain"
        return "raw"
    if data.startswith(b"r=") and b",s=" in data:
        return "scram-server-first"
    if data.startswith(b"v=") or data.startswith(b"e="):
        return "scram-server-final"
    if data.startswith(b"{"):
        return "oauth-error"
    return "raw"


_TYPES = {
    "plain": "SASL PLAIN", "oauth": "SASL OAUTHBEARER client", "oauth-error": "SASL OAUTHBEARER error",
    "scram-client-first": "SCRAM client-first", "scram-client-final": "SCRAM client-final",
    "scram-server-first": "SCRAM server-first", "scram-server-final": "SCRAM server-final",
    "raw": "SASL token",
}


def decode_token(buf: bytes, start: int, end: int, ctx: DecodeContext, mechanism: str | None,
                 from_client: bool, name: str = "sasl") -> Field:
    """One SASL token in ``buf[start:end]`` as a Field (offsets absolute)."""
    kind = _kind(buf, start, end, mechanism, from_client)
    root = Field(name, _TYPES[kind], None, start, end - start, [])
    if mechanism:
        root.note(f"mechanism {mechanism}")
    if kind == "plain":
        _plain(buf, start, end, ctx, root)
    elif kind == "oauth":
        _oauth_client(buf, start, end, ctx, root)
    elif kind == "scram-client-first":
        children: list[Field] = []
        pos = _gs2(buf, start, end, children)
        if pos is None:
            root.mark_malformed("SCRAM client-first without a GS2 header", ctx)
        else:
            _attrs(buf, pos, end, ctx, children)
        root.children = children
    elif kind.startswith("scram"):
        children = []
        if _attrs(buf, start, end, ctx, children):
            root.extra = {"secret": True}
        root.children = children
    elif kind == "oauth-error":
        root.value = _text(buf[start:end])
    else:
        root.value = buf[start:end]
        root.note("opaque token (mechanism unknown or binary, e.g. GSSAPI)")
    return root
