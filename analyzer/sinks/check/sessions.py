"""Rules on a connection's sessions: SASL authentication, fetch sessions (KIP-227)."""
from __future__ import annotations

from typing import Any

from analyzer.model import Exchange
from analyzer.sinks.insights import elements
from dissectors.field import body_of as _body
from dissectors.field import int_value as _int

from .common import (
    API_VERSIONS,
    ERROR_NAMES,
    FETCH,
    FETCH_SESSION_ID_NOT_FOUND,
    INT32_SPAN,
    INVALID_FETCH_SESSION_EPOCH,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    UNSUPPORTED_SASL_MECHANISM,
    ConnState,
    Unit,
    literal_text,
)

PRE_AUTH_APIS = {SASL_HANDSHAKE, API_VERSIONS, SASL_AUTHENTICATE}


class Sasl(Unit):
    """A connection's SASL handshake and authentication: the mechanism asked for, failures,
    requests sent before authentication completed."""
    ids = ("sasl-before-auth", "sasl-mechanism", "sasl-auth-failed")

    def add(self, ex: Exchange, cs: ConnState) -> None:
        key = ex.api_key
        if key not in (SASL_HANDSHAKE, SASL_AUTHENTICATE) and cs.sasl_handshake_frame is None:
            return
        on = self.on
        rbody = _body(ex.response_tree)
        code = _int(rbody.get("error_code")) if rbody is not None else None
        if key == SASL_HANDSHAKE:
            if cs.sasl_handshake_frame is None:
                cs.sasl_handshake_frame = ex.request_frame
                cs.sasl_handshake_version = ex.api_version
            qbody = _body(ex.request_tree)
            mech = qbody.get("mechanism") if qbody is not None else None
            offered = [m.value for m in elements(rbody.child("mechanisms"))] if rbody is not None else None
            if "sasl-mechanism" in on and rbody is not None and (
                    code == UNSUPPORTED_SASL_MECHANISM or (offered and mech is not None and mech not in offered)):
                if offered and mech in offered:
                    # refused, yet the broker's own list names it: the broker contradicts itself
                    how, tmpl = "broker-bug", ("{count} SaslHandshake(s): the broker refused {mechanism} "
                                               "({error}) but lists {mechanism} as enabled (a broker bug)")
                    fix = ""
                else:
                    how, tmpl = "not-offered", "SaslHandshake asked for {mechanism}, the broker offers {offered}"
                    fix = ("configure the client with a mechanism the broker offers ({offered}), or enable "
                           "{mechanism} on the broker's listener (sasl.enabled.mechanisms)")
                self.bucket("sasl-mechanism", "error", cs, (str(mech), how), tmpl,
                            {"mechanism": mech, "offered": ", ".join(map(str, offered or [])) or "nothing",
                             "error": ERROR_NAMES.get(code or 0)}, advice=fix).add(ex)
        elif key == SASL_AUTHENTICATE:
            sasl = rbody.child("auth_bytes") if rbody is not None else None
            sasl = sasl.child("sasl") if sasl is not None else None
            mech_error = sasl.get("error") if sasl is not None else None
            step = (sasl.type or "") if sasl is not None else ""
            if code == 0 and mech_error is None and ex.response is not None:
                if cs.sasl_ok_frame is None and "server-first" not in step:
                    cs.sasl_ok_frame = ex.response_frame
            elif (code or mech_error) and "sasl-auth-failed" in on:
                msg = rbody.get("error_message") if rbody is not None else None
                if msg in ("NONE", ""):
                    msg = None
                if code:
                    err = ERROR_NAMES.get(code, f"error {code}")
                    why = f" ({msg})" if msg else ""
                else:
                    err = f"{step or 'SASL'} error '{mech_error}'"
                    why = " although error_code is 0"
                self.bucket("sasl-auth-failed", "error", cs, (err,),
                            "{count} SaslAuthenticate failure(s): {error}{why}",
                            {"error": err, "why": why}, advice=literal_text(_sasl_advice(err, mech_error))
                            ).add(ex)
        elif key not in PRE_AUTH_APIS and "sasl-before-auth" in on and cs.sasl_handshake_version != 0:
            hs = cs.sasl_handshake_frame
            rf = ex.request_frame or 0
            if hs is not None and rf > hs and (cs.sasl_ok_frame is None or rf < cs.sasl_ok_frame):
                self.bucket("sasl-before-auth", "error", cs, (),
                            "{count} request(s) sent before SASL authentication completed",
                            {"handshake_frame": hs},
                            advice="a client bug (after SaslHandshake it must finish SaslAuthenticate before "
                                   "other requests): upgrade the client").add(ex, "request")


def _sasl_advice(error: str, mech_error: Any) -> str:
    """What to do about a failed SaslAuthenticate."""
    if mech_error == "unknown-user":
        return ("create the user's SCRAM credentials on the broker (kafka-configs --alter --entity-type users "
                "--add-config 'SCRAM-SHA-256=[password=...]'), or correct the client's username")
    if mech_error == "invalid-proof":
        return "the password is wrong: correct the client's password (or reset the user's SCRAM credentials)"
    if error.startswith("SASL_AUTHENTICATION_FAILED"):
        return "check the client's username, password and mechanism against the users the broker knows"
    return ""


class FetchSessions(Unit):
    """A connection's fetch session (KIP-227, Fetch v7+): its id and epoch as the requests
    use them, and the broker's session errors."""
    ids = ("fetch-session",)
    apis = frozenset({FETCH})

    def add(self, ex: Exchange, cs: ConnState) -> None:
        q = _body(ex.request_tree) if (ex.api_version or 0) >= 7 else None
        if q is None:
            return
        sid, epoch = _int(q.get("session_id")), _int(q.get("session_epoch"))
        if sid is None or epoch is None:
            return

        def report(kind: str, sev: str, msg: str, **extra: Any) -> None:
            b = self.bucket("fetch-session", sev, cs, (kind,), msg, dict(extra, kind=kind))
            b.add(ex, "request" if kind not in ("not-found", "invalid-epoch") else "both")

        if epoch > 0:
            if sid == 0:
                report("zero-id", "error",
                       "{count} Fetch request(s) with session_epoch > 0 but session_id 0 (no session)")
            elif cs.fetch_next_epoch is not None and sid == cs.fetch_sid and epoch != cs.fetch_next_epoch:
                report("epoch", "error",
                       "{count} Fetch request(s) whose session_epoch does not follow the previous one "
                       "(first: {got}, expected {expected})", got=epoch, expected=cs.fetch_next_epoch)
            elif cs.fetch_sid and sid != cs.fetch_sid:
                report("unknown-id", "warning",
                       "{count} Fetch request(s) using session id {sid} while the broker gave {given}",
                       sid=sid, given=cs.fetch_sid)
        r = _body(ex.response_tree)
        code = _int(r.get("error_code")) if r is not None else None
        if code in (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH):
            kind = "not-found" if code == FETCH_SESSION_ID_NOT_FOUND else "invalid-epoch"
            report(kind, "warning", "{count} {error} response(s) (first for session {sid}, epoch {epoch})",
                   error=ERROR_NAMES[code], sid=sid, epoch=epoch)
            cs.fetch_sid, cs.fetch_next_epoch = 0, None
            return
        if epoch == -1 or (epoch == 0 and sid == 0 and r is not None and not _int(r.get("session_id"))):
            cs.fetch_sid, cs.fetch_next_epoch = 0, None
        elif epoch == 0:
            new = _int(r.get("session_id")) if r is not None else None
            if new:
                cs.fetch_sid, cs.fetch_next_epoch = new, 1
        elif sid == cs.fetch_sid:
            cs.fetch_next_epoch = 1 if epoch >= INT32_SPAN - 1 else epoch + 1
