"""Options, limits and counters shared by one decoding run.

One DecodeContext lives for a whole capture (or a Spark task): the limits bound
what any single frame may cost, the counters feed the closing summary, and
``topic_names`` resolves topic IDs (UUIDs) to names learnt from Metadata,
DescribeTopicPartitions and CreateTopics responses seen earlier.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class DecodeContext:
    # limits (each reported with a note when hit)
    max_frame_size: int = 100 * 1024 * 1024
    max_decompressed: int = 64 * 1024 * 1024
    max_array_len: int = 1_000_000
    max_depth: int = 32
    # presentation
    show_secrets: bool = False
    decode_records: bool = True
    # learnt from the capture
    topic_names: dict[str, str] = field(default_factory=dict)
    # counters
    malformed: int = 0
    crc_invalid: int = 0
    crc_valid: int = 0
    trailing: int = 0          # messages followed by bytes their schema does not describe
    cut: int = 0               # messages cut short by the capture, decoded as far as they go
    limits_hit: dict[str, int] = field(default_factory=dict)

    def hit_limit(self, which: str) -> None:
        self.limits_hit[which] = self.limits_hit.get(which, 0) + 1
