"""What a Spark job is given: its configuration, and its captures (paths, globs and URIs
resolved into Sources, local ones checked as `read` would open them)."""
from __future__ import annotations

import glob
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from analyzer._core import CaptureError, open_capture
from analyzer.pipeline import Options
from analyzer.sinks.check import Checker
from analyzer.sinks.stats import COSTLY_VIEWS, DEFAULT_BY, Stories
from dissectors.context import DecodeContext

DEFAULT_SPLIT_SIZE = 64 * 1024 * 1024
DEFAULT_PACK_SIZE = 64 * 1024 * 1024

PCAP_MAGICS = {b"\xd4\xc3\xb2\xa1": ("<", False), b"\xa1\xb2\xc3\xd4": (">", False),
               b"\x4d\x3c\xb2\xa1": ("<", True), b"\xa1\xb2\x3c\x4d": (">", True)}   # -> endian, ns


class SparkJobError(Exception):
    """A problem the user can act on (one line)."""


@dataclass
class JobConfig:
    options: Options = field(default_factory=Options)
    ctx: DecodeContext = field(default_factory=DecodeContext)   # limits template
    by: tuple[str, ...] = DEFAULT_BY
    with_trees: bool = False
    rules: frozenset[str] | None = None
    slow_ms: float = 1000.0
    storm_rebalances: int = 5
    split_size: int = DEFAULT_SPLIT_SIZE
    pack_size: int = DEFAULT_PACK_SIZE
    partitions: int = 0                   # shuffle partitions; 0: chosen from the input size
    force_hadoop: bool = False            # read local files through binaryFiles too (tests)
    # the tables are written (--out): every column of every table as ``export`` makes it (False:
    # the rows of exchanges and batches only, the figures' source, the exchanges'
    # topic_partitions read only when grouping by topic or partition)
    rows: bool = True
    direct_max: int = -1                  # whole files up to this size skip the shuffle (-1: from input, cores)
    top: int = 0                          # the slowest exchanges listed (stats.json "top"), as `stats --top`
    display_filter: str | None = None     # -Y: only the exchanges it selects make rows, figures, findings
    views: tuple[str, ...] = COSTLY_VIEWS  # the costly stories kept (committed lag, in-flight depth)

    def new_stories(self) -> Stories:
        return Stories(self.views)

    @property
    def tree_rows(self) -> bool:
        """The exchanges' rows carry the field trees (written with --with-trees)."""
        return self.with_trees and self.rows

    def new_checker(self) -> Checker:
        return Checker(set(self.rules) if self.rules is not None else None, slow_ms=self.slow_ms,
                       storm_rebalances=self.storm_rebalances)


@dataclass(frozen=True)
class Source:
    file_id: int
    name: str               # as reported (the `capture` column): the path or URI
    local: str | None       # local filesystem path, or None: read through Hadoop
    size: int
    kind: str               # "pcap" | "pcapng" | "gzip" | "remote"
    endian: str = "<"
    uri: str | None = None  # what binaryFiles reads when ``local`` is None (default: name)

    @property
    def hadoop_uri(self) -> str:
        return self.uri or self.name


def _sniff(path: str, name: str) -> dict[str, Any]:
    """Kind and byte order of a local capture (Source's fields); CaptureError
    if it is none."""
    try:
        with open(path, "rb") as f:
            head = f.read(40)
    except OSError as e:
        raise CaptureError(f"{name}: cannot open: {e.strerror or e}") from None
    if head[:2] == b"\x1f\x8b":
        kind: dict[str, Any] = {"kind": "gzip"}
    elif head[:4] in PCAP_MAGICS:
        endian, _ns = PCAP_MAGICS[head[:4]]
        kind = {"kind": "pcap", "endian": endian}
    elif head[:4] == b"\x0a\x0d\x0d\x0a":
        bom = head[8:12]
        kind = {"kind": "pcapng", "endian": ">" if bom == b"\x1a\x2b\x3c\x4d" else "<"}
    else:
        kind = {"kind": "other"}
    # let the reader judge the header and the first packet, as `read` would
    with open_capture(path) as reader:
        for _pkt in reader:
            break
    return kind


def resolve_inputs(patterns: Iterable[str], hadoop_glob: Callable[[str], list[tuple[str, int]]] | None = None,
                   force_hadoop: bool = False) -> list[Source]:
    """Expand paths, globs and URIs into Sources (in the order given; duplicates dropped).

    ``file://`` URIs are local paths. Other URIs go through ``hadoop_glob(uri) ->
    [(uri, size)]`` (the driver's Hadoop FileSystem); without it they are an error.
    """
    out: list[Source] = []
    seen: set[str] = set()
    for pat in patterns:
        local = pat[len("file://"):] if pat.startswith("file://") else (None if "://" in pat else pat)
        if local is None:
            if hadoop_glob is None:
                raise SparkJobError(f"{pat}: cannot read this URI without Spark's Hadoop filesystem")
            found = hadoop_glob(pat)
            if not found:
                raise SparkJobError(f"{pat}: no such file")
            for uri, size in found:
                if uri not in seen:
                    seen.add(uri)
                    out.append(Source(len(out), uri, None, size, "remote"))
            continue
        matches = sorted(glob.glob(local)) if glob.has_magic(local) else [local]
        if not matches:
            raise SparkJobError(f"{pat}: no file matches")
        for m in matches:
            if os.path.isdir(m):
                raise SparkJobError(f"{m}: is a directory (give the capture files, or a glob)")
            if not os.path.exists(m):
                raise SparkJobError(f"{m}: no such file")
            name = pat if (pat == m or not glob.has_magic(local)) else m
            if name in seen:
                continue
            seen.add(name)
            info = _sniff(m, name)
            size = os.path.getsize(m)
            if force_hadoop:
                out.append(Source(len(out), name, None, size, "remote", uri="file://" + os.path.abspath(m)))
            else:
                out.append(Source(len(out), name, os.path.abspath(m), size, **info))
    if not out:
        raise SparkJobError("no capture files given")
    return out


def capture_label(src: Source, many: bool) -> str | None:
    """How the slowest exchanges name a capture: its base name, or None for a lone capture."""
    return os.path.basename(src.name.rstrip("/")) if many else None


def capture_names(sources: list[Source]) -> dict[str | None, str]:
    """What the slowest exchanges' ``capture`` (a base name, or None for a lone capture) stands for."""
    return {capture_label(s, len(sources) > 1): s.name for s in sources}


def capture_labels(sources: list[Source]) -> dict[str, str] | None:
    """The figures' ``labels`` (``analyzer.figures.report``): the tables' ``capture`` column (the
    input as named) -> its label, for several captures; None for a lone one."""
    if len(sources) < 2:
        return None
    return {s.name: str(capture_label(s, True)) for s in sources}
