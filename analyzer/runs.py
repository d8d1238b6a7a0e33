"""How a run of the pipeline starts, for every runner (a file, the worker processes, live, a
Spark task) and not only for the commands: the decode mode its output needs, and a
DecodeContext of its own. Runners never import the CLI (design.md), so this is not in
``analyzer.commands``."""
from __future__ import annotations

from enum import Enum

from dissectors.context import DecodeContext, Limits


class Decode(str, Enum):
    """How a run decodes exchanges: full field trees (``full``), headers only (``none``), or
    the core's lean trees (``lean``: what `stats` reads, counting what full trees count),
    with each request's topics and partition indexes (``topics``: `stats` by topic or
    partition, summary lines) and what check's rules read besides (``check``)."""
    FULL = "full"
    NONE = "none"
    LITE = "lite"
    LITE_TOPICS = "lite-topics"
    LITE_CHECK = "lite-check"
    LITE_TOPICS_CHECK = "lite-topics-check"

    @property
    def lean(self) -> bool:
        return self.value.startswith("lite")

    @property
    def topics(self) -> bool:
        return self in (Decode.LITE_TOPICS, Decode.LITE_TOPICS_CHECK)

    @property
    def check(self) -> bool:
        return self in (Decode.LITE_CHECK, Decode.LITE_TOPICS_CHECK)

    @staticmethod
    def lite(topics: bool = False, check: bool = False) -> Decode:
        """The lean mode with (or without) the requests' topics and check's reads."""
        return _LITE[topics, check]


_LITE = {(False, False): Decode.LITE, (True, False): Decode.LITE_TOPICS,
         (False, True): Decode.LITE_CHECK, (True, True): Decode.LITE_TOPICS_CHECK}


def lean_decode(max_depth: int, lean: Decode) -> Decode:
    """The decode mode of a command whose output lean trees give as full trees would
    (``lean``: lite for `stats` and `live --stats`, lite with topics for the summary lines of
    `read` and `live` and `stats` grouped by topic, lite with check's reads for `check` and
    the Spark job), unless a lowered --max-depth asks for full trees (the full decoder can
    hit it; the lean walk has no depth limit and the schema nests less deep than the
    default). A display filter reads lean trees too: it decodes full trees for the exchanges
    that reach a test of a tree field (analyzer.display_filter)."""
    return lean if max_depth >= Limits.max_depth else Decode.FULL


def fresh_context(template: DecodeContext) -> DecodeContext:
    """A new context with the template's limits and presentation, no topic names and zeroed counters."""
    return DecodeContext(template.limits, template.presentation)
