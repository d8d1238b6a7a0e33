"""How a run of the pipeline starts, for every runner (a file, the worker processes, live, a
Spark task) and not only for the commands: the decode mode its output needs, and a
DecodeContext of its own. Runners never import the CLI (design.md), so this is not in
``analyzer.commands``."""
from __future__ import annotations

from dissectors.context import DecodeContext

# the decoders' nesting limit unless --max-depth says otherwise (DecodeContext's default)
DEFAULT_MAX_DEPTH = DecodeContext().max_depth


def lean_decode(max_depth: int, lean: str) -> str:
    """The decode mode of a command whose output lean trees give as full trees would
    (``lean``: ``lite`` for `stats` and `live --stats`, ``lite-topics`` for the summary
    lines of `read` and `live` and `stats` grouped by topic, ``lite-check`` for `check` and
    the Spark job), unless a lowered --max-depth asks for full trees (the
    full decoder can hit it; the lean walk has no depth limit and the schema nests less
    deep than the default). A display filter reads lean trees too: it decodes full trees
    for the exchanges that reach a test of a tree field (analyzer.display_filter)."""
    return lean if max_depth >= DEFAULT_MAX_DEPTH else "full"


def fresh_context(template: DecodeContext) -> DecodeContext:
    """A new context with the template's limits and presentation, and zeroed counters."""
    t = template
    return DecodeContext(max_frame_size=t.max_frame_size, max_decompressed=t.max_decompressed,
                         max_array_len=t.max_array_len, max_depth=t.max_depth, show_secrets=t.show_secrets,
                         decode_records=t.decode_records)
