"""What the Python side keeps of Kafka request and response headers, without Field trees.

The checks that framing and pairing run on every frame (parsing a request header, whether
a frame's first bytes are a plausible request, tagged-field sections) are the core's:
core/src/kafka.rs, handed the schema at start-up by :func:`api_table`. Here are the
``RequestHeader`` the core's exchange records carry (``analyzer.decoding`` builds one from
each), the correlation id that starts a response frame (an orphan response's tree shows
it), and the window above an API's newest version that the core and the decoder share.
The full annotated header is produced by ``dissectors.kafka``.

Header versions (see ``dissectors.schema``): request header v0 (api_key, api_version,
correlation_id) is used only by ControlledShutdown v0; v1 adds the nullable client_id
string; v2 (flexible versions) adds tagged fields. Response header v0 is the
correlation_id; v1 adds tagged fields; ApiVersions responses always use v0.
"""
from __future__ import annotations

from typing import NamedTuple

from dissectors.schema import APIS, ApiDef, request_header_version

# a known API's version at most this far above the newest the schema knows is plausible (the
# core has it in api_table's entries); the decoder tries the newest layout on such a version
# (dissectors.kafka.NEWER_VERSIONS_TRIED)
MAX_NEWER_PLAUSIBLE = 8


class RequestHeader(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    header_len: int        # bytes from the frame start to the first body byte
    header_version: int


def api_table(apis: dict[int, ApiDef] | None = None) -> list[tuple[int, int, int, list[int]]]:
    """What the core's framing and pairing need of the schema (``apis``, else ``APIS``),
    handed to it at start-up (``analyzer._core.HeaderTable``): each known API key with its
    newest version, the newest version still plausible (``MAX_NEWER_PLAUSIBLE`` above it),
    and the request header version of each version up to the newest (a newer version's
    header is the newest one's: ``request_header_version`` clamps)."""
    apis = APIS if apis is None else apis
    return [(key, api.max_version, api.max_version + MAX_NEWER_PLAUSIBLE,
             [request_header_version(key, v) for v in range(api.max_version + 1)])
            for key, api in sorted(apis.items())]
