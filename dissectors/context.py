"""What one decoding run carries through the decoders: four separate things in one object.

``DecodeContext`` is what every decoder receives; it is the composition of

- ``limits`` (``Limits``, frozen): what decoding any single frame may cost. Each limit
  reached is counted under its own name in ``counts.limits_hit`` and noted on the field it
  cut. ``Limits``' field defaults are the one set of defaults of these limits (the
  CLI's options take theirs from here). The size a frame may declare is the framing's
  (``analyzer.pipeline.Options.max_frame_size``), not a decoder's; the runner counts each
  one over it in ``counts.limits_hit`` as ``max_frame_size``.
- ``presentation`` (``Presentation``, frozen): what the trees show — secrets in clear or
  redacted, record batches decoded into their records or not.
- ``topic_names``: what the capture taught, topic id (UUID) -> name, from the Metadata,
  DescribeTopicPartitions and CreateTopics responses seen earlier; it grows as the run goes.
- ``counts`` (``Counters``): what the run met, for the closing summary. A new context's
  counters are zero; they only grow.

One context lives for a whole capture (or a worker's share of one, or a Spark task). A run
started from another's settings takes its ``limits`` and ``presentation`` (both immutable,
so shared) and has topic names and counters of its own. A trial decode (does this layout
fit?) runs on a scratch context so its counts do not reach the run's.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Limits:
    max_decompressed: int = 64 * 1024 * 1024  # decompressed bytes per records value
    max_array_len: int = 1_000_000            # element count accepted from the wire
    max_depth: int = 32                       # nesting of structures


@dataclass(frozen=True)
class Presentation:
    show_secrets: bool = False      # SASL secrets and secret config values in clear
    decode_records: bool = True     # record batches decoded into their records


@dataclass(slots=True)
class Counters:
    malformed: int = 0         # fields marked malformed (bad protocol bytes)
    crc_invalid: int = 0       # record batches / messages whose CRC does not match
    crc_valid: int = 0
    trailing: int = 0          # messages followed by bytes their schema does not describe
    cut: int = 0               # messages cut short by the capture, decoded as far as they go
    limits_hit: dict[str, int] = field(default_factory=dict)   # limit's name -> times reached

    def hit_limit(self, which: str) -> None:
        self.limits_hit[which] = self.limits_hit.get(which, 0) + 1


@dataclass(slots=True)
class DecodeContext:
    limits: Limits = Limits()
    presentation: Presentation = Presentation()
    topic_names: dict[str, str] = field(default_factory=dict)
    counts: Counters = field(default_factory=Counters, init=False)
