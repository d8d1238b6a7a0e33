"""PLACEHOLDER until tools/gen_schema.py writes the real table (work in progress)."""
from dissectors.schema import ANY, ApiDef, FieldDef  # noqa: F401

APIS: dict[int, ApiDef] = {}
