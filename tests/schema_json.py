"""Write the schema (``dissectors.schema.APIS``) as JSON, for the core's figures fuzz target.

    python3 tests/schema_json.py OUT.json

``{"apis": [...], "header_table": [...], "consumer": {"subscription": [...], "assignment": [...]}}``:
the APIs,
each ``{key, name, min_version, max_version, flexible_from, request, response}``, and the
consumer protocol's fields (``dissectors.consumer``), and the header table the pipeline hands
the core (``dissectors.header.api_table``); a field is ``{name, type, versions,
nullable, tag, tagged, struct, element, fields, meaning}`` (ranges as ``[lo, hi]`` or
null), as ``core/src/py/figures.rs`` reads the same NamedTuples.
"""
from __future__ import annotations

import json
import sys
from typing import Any

from dissectors.consumer import ASSIGNMENT, SUBSCRIPTION
from dissectors.header import api_table
from dissectors.schema import APIS, ApiDef, FieldDef


def field(fd: FieldDef) -> dict[str, Any]:
    return {
        "name": fd.name,
        "type": fd.type,
        "versions": list(fd.versions),
        "nullable": list(fd.nullable) if fd.nullable is not None else None,
        "tag": fd.tag,
        "tagged": list(fd.tagged) if fd.tagged is not None else None,
        "struct": fd.struct,
        "element": fd.element,
        "fields": [field(c) for c in fd.fields],
        "meaning": fd.meaning,
    }


def api(a: ApiDef) -> dict[str, Any]:
    return {
        "key": a.key,
        "name": a.name,
        "min_version": a.min_version,
        "max_version": a.max_version,
        "flexible_from": a.flexible_from,
        "request": [field(f) for f in a.request],
        "response": [field(f) for f in a.response],
    }


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    with open(argv[1], "w") as out:
        json.dump({"apis": [api(a) for _k, a in sorted(APIS.items())], "header_table": api_table(),
                   "consumer": {"subscription": [field(f) for f in SUBSCRIPTION],
                                "assignment": [field(f) for f in ASSIGNMENT]}}, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
