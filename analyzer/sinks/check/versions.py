"""Rules on API versions: what the schema does not know, what the broker did not advertise
in ApiVersions on the connection, the client's answer to an UNSUPPORTED_VERSION
ApiVersions, versions Kafka 4.0 removed."""
from __future__ import annotations

from analyzer.model import Exchange
from dissectors.field import Field
from dissectors.field import body_of as _body
from dissectors.field import int_value as _int

from .common import (
    API_VERSIONS,
    MAX_LIST,
    UNSUPPORTED_VERSION,
    ConnState,
    Finding,
    Settings,
    Unit,
    exchange_ref,
    literal_text,
    ref_of,
    render,
)

try:  # the schema table may still be a placeholder: every use tolerates a missing API
    from dissectors.schema import APIS
except ImportError:  # pragma: no cover - contracts are in the repo
    APIS = {}

_FALLBACK = (
    ("retried", "info", "ApiVersions v{api_version} answered UNSUPPORTED_VERSION; the client retried with "
                        "v{retry_version}",
     "nothing: the client is newer than the broker and asked again in a version the broker takes"),
    ("stuck", "warning", "ApiVersions v{api_version} answered UNSUPPORTED_VERSION and the client did not retry "
                         "on this connection",
     "upgrade the client: on this answer it should ask again with a version the broker takes (KIP-511)"))


class Versions(Unit):
    """Each request's API and version against the schema, the broker's ApiVersions answer
    on the connection (kept: error-response reads it too) and Kafka 4.0's versions."""
    ids = ("unknown-api", "version-unadvertised", "apiversions-fallback", "kafka4-removed")
    always = True

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        # one dict for the same advertised versions (a broker answers every connection alike)
        self.tables: dict[tuple[tuple[int, tuple[int, int]], ...], dict[int, tuple[int, int]]] = {}

    def add(self, ex: Exchange, cs: ConnState) -> None:
        on = self.on
        key, ver = ex.api_key, ex.api_version
        assert key is not None
        if ver is None:
            return
        api = APIS.get(key)
        if api is None or ver > api.max_version:
            if "unknown-api" in on:
                what = (f"unknown API key {key}" if api is None
                        else f"{ex.api_name} v{ver}, newer than the newest known (v{api.max_version})")
                self.bucket("unknown-api", "warning", cs, (key, ver),
                            "{count} request(s) with {what}: framed and paired, body not judged",
                            {"what": what, "api_key": key, "api_version": ver}).add(ex, "request")
            if api is None:
                return
        if key == API_VERSIONS:
            self._answer(ex, cs)
        elif "version-unadvertised" in on and cs.advertised is not None \
                and (ex.request_frame or 0) > cs.advertised_frame:
            rng = cs.advertised.get(key)
            if rng is None or not rng[0] <= ver <= rng[1]:
                adv_s = f"v{rng[0]}-v{rng[1]}" if rng else "not advertised"
                self.bucket("version-unadvertised", "error", cs, (key, ver),
                            "{count} {api_name} v{api_version} request(s) from {clients}, but the broker "
                            + ("advertised {advertised}" if rng else "did not advertise {api_name}")
                            + " on this connection",
                            {"api_name": ex.api_name, "api_version": ver, "advertised": adv_s,
                             "advertised_frame": cs.advertised_frame, "client_ids": [ex.client_id]},
                            advice="the client did not keep to the broker's ApiVersions answer (a client "
                                   "bug): upgrade the client, or pin it to the versions the broker advertised"
                            ).add(ex, [f for f in (cs.advertised_frame, ex.request_frame) if f],
                                  client_ids=ex.client_id)
        if "kafka4-removed" in on and ver <= api.max_version:
            k4 = api.kafka4_versions
            if k4 is None or not k4[0] <= ver <= k4[1]:
                # (one finding per API, its versions listed)
                still = f"4.0 serves v{k4[0]}-v{k4[1]}" if k4 else "4.0 removed the API"
                fix = (f"upgrade the client to one that sends {ex.api_name} v{k4[0]} or later before the brokers "
                       "move to Kafka 4.0" if k4 else
                       f"stop using {ex.api_name} (or upgrade the client) before the brokers move to Kafka 4.0")
                self.bucket("kafka4-removed", "warning", cs, (key,),
                            "{count} {api_name} {versions} request(s) from {clients}: Kafka {kafka4} (KIP-896)",
                            {"api_name": ex.api_name, "api_versions": [ver], "client_ids": [ex.client_id],
                             "kafka4": still}, advice=literal_text(fix)
                            ).add(ex, "request", api_versions=ver, client_ids=ex.client_id)

    def _answer(self, ex: Exchange, cs: ConnState) -> None:
        """An ApiVersions exchange: the versions the broker advertises on the connection, or
        its UNSUPPORTED_VERSION answer (and later, the client's retry)."""
        body = _body(ex.response_tree)
        if body is None:
            return
        code = _int(body.get("error_code")) or 0
        adv = _advertised(body)
        if code == 0:
            # (a list the capture cut short is not the broker's whole answer)
            if adv and not (ex.response is not None and ex.response.truncated):
                table = self.tables.get(k := tuple(adv.items()))
                if table is None:
                    if len(self.tables) >= 1024:
                        self.tables.clear()
                    table = self.tables[k] = adv
                cs.advertised = table
                cs.advertised_frame = ex.response_frame or 0
            for fb in cs.fallback or ():   # a successful ApiVersions after an UNSUPPORTED_VERSION answer
                if fb.get("retry") is None and (ex.request_frame or 0) > fb["response_frame"]:
                    fb["retry"] = exchange_ref(ex)
        elif code == UNSUPPORTED_VERSION and "apiversions-fallback" in self.on:
            if cs.fallback is None:
                cs.fallback = []
            cs.fallback.append(dict(exchange_ref(ex), supported=adv.get(API_VERSIONS), retry=None))

    def retire(self, cs: ConnState) -> bool:
        cs.advertised = None
        return bool(cs.fallback)

    def merge_conn(self, mine: ConnState, other: ConnState) -> None:
        if other.fallback:
            mine.fallback = (mine.fallback or []) + other.fallback

    def conn_end(self, cs: ConnState, end: float) -> list[Finding]:
        if not cs.fallback or "apiversions-fallback" not in self.on:
            return []
        out = []
        for kind, sev, msg, fix in _FALLBACK:
            group = [fb for fb in cs.fallback if bool(fb.get("retry")) == (kind == "retried")]
            if not group:
                continue
            fb = group[0]
            refs = [ref_of(g) for g in group]
            frames: list[int] = []
            for g in group:
                frames += [f for f in (g["request_frame"], g["response_frame"]) if f]
                if g.get("retry"):
                    refs.append(g["retry"])
                    frames += [f for f in (g["retry"]["request_frame"], g["retry"]["response_frame"]) if f]
            rv = fb["retry"]["api_version"] if fb.get("retry") else None
            det = {"count": len(group), "broker_supports": fb.get("supported"), "retry_version": rv,
                   "api_version": fb["api_version"]}
            out.append(Finding("apiversions-fallback", sev, render(msg, det), cs.name, sorted(set(frames))[:MAX_LIST],
                               refs[:MAX_LIST], det, advice=fix, story=(fb["api_version"], rv), template=msg,
                               advice_template=fix))
        return out


def _advertised(body: Field) -> dict[int, tuple[int, int]]:
    """An ApiVersions answer's versions by API key: its api_keys' extra["versions"], which
    full and lean trees both carry (dissectors.kafka.versions_table)."""
    keys = body.child("api_keys")
    table = keys.extra.get("versions") if keys is not None and keys.extra else None
    return table if isinstance(table, dict) else {}
