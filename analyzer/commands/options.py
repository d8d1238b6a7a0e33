"""What the commands share: the options of every command that reads captures (capture
selection, decoding limits, the display filter) and of several (--by, --rule), reading the
captures they name (``iter_captures``), the closing summary of `read` and `live`, and
writing the tables of captures as Parquet (`export`, `sql`, `spark`)."""
from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import click

from analyzer.errors import UserError, warn_damaged
from analyzer.runs import Decode, fresh_context, lean_decode
from dissectors.context import DecodeContext, Limits, Presentation

# (the pipeline is imported when a command runs: `--help` goes without it, and so does
# `live` until its socket is open)
if TYPE_CHECKING:
    from analyzer.pipeline import Options


def _size(text: str) -> int:
    t = text.strip().lower()
    mult = 1
    for suffix, m in (("kib", 1024), ("mib", 1024**2), ("gib", 1024**3), ("k", 1024), ("m", 1024**2),
                      ("g", 1024**3)):
        if t.endswith(suffix):
            t, mult = t[: -len(suffix)], m
            break
    try:
        v = int(float(t) * mult)
    except ValueError:
        raise click.BadParameter(f"not a size: {text!r} (use e.g. 64MiB)") from None
    if v <= 0:
        raise click.BadParameter(f"size must be positive: {text!r}")
    return v


class Size(click.ParamType):
    """A size in bytes, with an optional unit (k/KiB, m/MiB, g/GiB); at least ``minimum``
    (a size as the option takes it, e.g. "64KiB")."""
    name = "SIZE"

    def __init__(self, minimum: str = "1") -> None:
        self.minimum_text = minimum
        self.minimum = _size(minimum)

    def convert(self, value: Any, param: Any, ctx: Any) -> int:
        if isinstance(value, int):
            v = value
        else:
            try:
                v = _size(str(value))
            except click.BadParameter as e:
                self.fail(str(e), param, ctx)
        if v < self.minimum:
            self.fail(f"{v} bytes is too small: at least {self.minimum_text} (a number without "
                      f"a unit is bytes: e.g. 8MiB)", param, ctx)
        return v


class Port(click.ParamType):
    """A TCP port number, 1-65535."""
    name = "PORT"

    def convert(self, value: Any, param: Any, ctx: Any) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            n = value
        else:
            text = str(value).strip()
            n = int(text) if text.isdigit() else -1
        if not 1 <= n <= 65535:
            self.fail(f"{value!r} is not a port number (1-65535)", param, ctx)
        return n


CAPTURE_OPTIONS = [
    click.option("-p", "--port", "ports", multiple=True, type=Port(),
                 help="Kafka broker port (repeatable; default 9092). Other ports are auto-detected."),
    click.option("--no-autodetect", is_flag=True, help="Only analyse the --port ports."),
    click.option("--protocol", type=click.Choice(["auto", "legacy", "modern"]), default="auto", show_default=True,
                 help="Force the pre-0.8 (legacy) or 0.8+ (modern) protocol instead of detecting it."),
    click.option("--max-frame-size", type=Size(), default="100MiB", show_default=True,
                 help="Larger size prefixes mean the stream is desynchronised."),
    click.option("--max-decompressed", type=Size(), default="64MiB", show_default=True,
                 help="Decompressed-size limit per record batch."),
    click.option("--max-array-len", type=click.IntRange(min=1), default=Limits.max_array_len, show_default=True,
                 help="Largest array element count accepted from the wire."),
    click.option("--max-depth", type=click.IntRange(min=1), default=Limits.max_depth, show_default=True,
                 help="Deepest nesting of structures decoded from the wire."),
    click.option("--tls-keylog", type=click.Path(dir_okay=False),
                 help="SSLKEYLOGFILE (NSS key log) to decrypt TLS 1.2/1.3 connections and dissect the Kafka inside."),
    click.option("--show-secrets", is_flag=True,
                 help="Show SASL passwords, tokens and secret config values instead of redacting them."),
]


def capture_options(f: Callable[..., Any]) -> Callable[..., Any]:
    for opt in reversed(CAPTURE_OPTIONS):
        f = opt(f)
    return f


CAPTURE_OPTION_NAMES = ("ports", "no_autodetect", "protocol", "max_frame_size", "max_decompressed",
                        "max_array_len", "max_depth", "show_secrets", "tls_keylog")


def check_captures(paths: tuple[str, ...]) -> None:
    """Each path names a capture we can read: a regular file is opened and its header read
    (cheap), anything else (a pipe, ``<(zcat x.pcap)``) only looked up, as reading its
    header would consume it. Every bad path is named, one line each; CaptureError for the last."""
    from analyzer._core import CaptureError, open_capture

    bad: list[str] = []
    for path in dict.fromkeys(paths):
        try:
            if os.path.exists(path) and not os.path.isfile(path) and not os.path.isdir(path):
                continue
            open_capture(path).close()
        except CaptureError as e:
            bad.append(str(e))
    for message in bad[:-1]:
        click.echo(f"kafkawire-sniff: error: {message}", err=True)
    if bad:
        raise CaptureError(bad[-1])


def options_from_kwargs(kw: dict[str, Any], decode: Decode = Decode.FULL) -> tuple[Options, DecodeContext]:
    """Build pipeline Options and a DecodeContext from the shared options (removing them from kw)."""
    from analyzer.pipeline import Options

    g = {k: kw.pop(k) for k in CAPTURE_OPTION_NAMES if k in kw}
    opts = Options(
        ports=tuple(g.get("ports") or ()) or (9092,),
        autodetect=not g.get("no_autodetect", False),
        protocol=g.get("protocol", "auto"),
        decode=decode,
        max_frame_size=g.get("max_frame_size", Options.max_frame_size),
        tls_keylog=_keylog(g.get("tls_keylog")),
    )
    ctx = DecodeContext(
        Limits(
            max_decompressed=g.get("max_decompressed", Limits.max_decompressed),
            max_array_len=g.get("max_array_len", Limits.max_array_len),
            max_depth=g.get("max_depth", Limits.max_depth),
        ),
        Presentation(show_secrets=g.get("show_secrets", False)),
    )
    return opts, ctx


def _keylog(path: str | None) -> Any:
    if not path:
        return None
    from analyzer.tlsdecrypt import TlsKeyLog
    return TlsKeyLog.load(path)


# ``-j/--jobs`` of stats and check
jobs_option = click.option("-j", "--jobs", type=click.IntRange(min=0), default=0, show_default=True,
                           help="Worker processes per capture, each taking a share of the TCP connections "
                                "(0: one per CPU for captures of 8 MB or more, else 1).")


def _compile_filter(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    if value is None:
        return None
    from analyzer.display_filter import FilterError, compile_filter

    try:
        return compile_filter(value)
    except FilterError as e:
        raise UserError(f"-Y: {e}", 2) from None


def filter_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """``-Y/--filter EXPR``: the display filter (``analyzer.display_filter``), compiled."""
    return click.option("-Y", "--filter", "display_filter", metavar="EXPR", callback=_compile_filter,
                        help="Only exchanges this display filter selects, e.g. "
                             "'api_name == JoinGroup && latency_ms > 250' (see the README).")(f)


def iter_captures(paths: tuple[str, ...], kw: dict[str, Any], progress: bool = True,
                  decode: Decode = Decode.FULL, tables: bool = False,
                  hand: frozenset[int] = frozenset(), hand_failed: frozenset[int] = frozenset()
                  ) -> Iterator[tuple[str, Any]]:
    """(path, Run) for each capture, with the shared options and a decode mode applied;
    ``tables``: the core builds the exchange tables' rows (``Options.tables``, the path the
    capture's name in them), a lean ``decode``, and hands those of the API keys ``hand`` on
    (of ``hand_failed``, those unanswered or answered with an error code).
    Every path is checked before the first is read (``check_captures``): a missing file or
    one that is not a capture stops the command before it prints anything."""
    from analyzer.pipeline import Run

    check_captures(paths)
    options, ctx = options_from_kwargs(kw, decode=decode)
    for path in paths:
        update, close = _progress(progress)
        run = Run(path, replace(options, tables=path, hand=hand, hand_failed=hand_failed) if tables else options,
                  fresh_context(ctx),
                  progress=update)
        try:
            yield path, run
        finally:
            close()


def _progress(enabled: bool) -> tuple[Callable[[int, int], None] | None, Callable[[], None]]:
    """A progress bar on stderr for big captures on a terminal: (update, close)."""
    if not enabled or not sys.stderr.isatty():
        return None, lambda: None
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

    prog = Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(),
                    TimeRemainingColumn(), transient=True, console=Console(stderr=True))
    task = None

    def update(done: int, total: int) -> None:
        nonlocal task
        if task is None:
            if total < 8 * 1024 * 1024:
                return
            prog.start()
            task = prog.add_task("reading", total=total)
        prog.update(task, completed=done)

    def close() -> None:
        if task is not None:
            prog.stop()
    return update, close


# the kinds of connection in the summary, each connection counted once (see Summary)
CONNECTION_KINDS = (("kafka_connections", "kafka"), ("kafka_tls_connections", "kafka in decrypted TLS"),
                    ("tls_connections", "TLS not decrypted"), ("other_connections", "unidentified TCP"),
                    ("empty_connections", "no payload"))


def summary_text(summary: Any, ctx: Any) -> list[str]:
    """The closing summary of `read` and `live`, a line each."""
    from analyzer.sinks.output import detection_lines

    d = summary.to_json(ctx)
    ex = d["exchanges"]
    kinds = ", ".join(f"{name} {d[key]}" for key, name in CONNECTION_KINDS if d.get(key))
    lines = [
        f"packets: {d['packets']}"
        + (f" (not analysed: {', '.join(f'{k} {v}' for k, v in sorted(d['packets_skipped'].items()))})"
           if d["packets_skipped"] else ""),
        f"connections: {d['connections']}" + (f" ({kinds})" if kinds else ""),
        f"kafka frames: {d['request_frames']} requests, {d['response_frames']} responses"
        + (f", {d['truncated_frames']} truncated in the capture" if d["truncated_frames"] else ""),
        "exchanges: " + (", ".join(f"{k} {v}" for k, v in sorted(ex.items())) or "none"),
    ]
    lines += detection_lines(d)
    if d["bytes_skipped"]:
        lines.append("bytes skipped: " + ", ".join(f"{k} {v}" for k, v in sorted(d["bytes_skipped"].items())))
    if d["gaps"]:
        lines.append(f"gaps in TCP streams: {d['gaps']} ({d['gap_bytes']} bytes not captured)")
    if d.get("crc_valid") or d.get("crc_invalid"):
        lines.append(f"CRC: {d['crc_valid']} valid, {d['crc_invalid']} INVALID")
    if d.get("cut_messages"):
        lines.append(f"cut by the capture: {d['cut_messages']} messages, decoded as far as their captured bytes go")
    if d.get("malformed_fields"):
        lines.append(f"malformed fields: {d['malformed_fields']}")
    if d.get("limits_hit"):
        lines.append("limits hit: " + ", ".join(f"{k} {v}" for k, v in d["limits_hit"].items()))
    for k, v in sorted(d["notes"].items()):
        lines.append(f"{k}: {v}")
    for t in d.get("tls", ()):
        how = t.get("decryption") or "encrypted: not decoded (use --tls-keylog)"
        if t.get("cipher_suite"):
            how += f", {t['cipher_suite']}"
        lines.append(f"TLS connection {t['conn']}: {t.get('client')} -> {t.get('broker')} {t.get('version') or ''}"
                     + (f" SNI {t['sni']}" if t.get("sni") else "") + f" ({how})")
    if d.get("capture_warning"):
        lines.append(f"warning: {d['capture_warning']}")
    return lines


def by_param(ctx: click.Context, param: click.Parameter, value: str) -> tuple[str, ...]:
    """``--by`` of stats and spark: the group keys."""
    from analyzer.sinks.stats import parse_by

    try:
        return parse_by(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None


def rule_list(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    """``--rule`` / ``--skip-rule`` of check and spark: names, repeatable or comma-separated."""
    from analyzer.sinks.check import RULES

    names = tuple(n.strip() for v in value for n in v.split(",") if n.strip())
    unknown = [n for n in names if n not in RULES]
    if unknown:
        raise click.BadParameter(f"unknown rule {', '.join(unknown)} (see 'kafkawire-sniff check --list-rules')")
    return names


# -- the tables of captures as Parquet: export, sql, and spark's --out ---------------------

def check_files(captures: tuple[str, ...]) -> None:
    """Every capture named is a readable file, before any is read or an output folder made
    (one line for the first that is not)."""
    for path in captures:
        if not os.path.exists(path):
            raise UserError(f"no such capture: {path}")
        if os.path.isdir(path):
            raise UserError(f"{path} is a folder, not a capture")
        if not os.access(path, os.R_OK):
            raise UserError(f"cannot read {path} (permission denied)")


def prepare_out(out: str, overwrite: bool, names: Iterable[str] | None = None) -> None:
    """``out`` made ready for what a command writes there (``names``, by default the tables):
    new, empty, or (with ``overwrite``) holding only such outputs, which go; anything else
    there is refused, never deleted."""
    import shutil

    from analyzer.tables import TABLES

    names = set(names if names is not None else (t.name for t in TABLES))
    if os.path.exists(out):
        if not os.path.isdir(out):
            raise UserError(f"--out {out} is a file, not a folder")
        there = set(os.listdir(out))
        if there and not overwrite:
            raise UserError(f"--out {out} is not empty (use --overwrite to replace its tables)")
        foreign = sorted(there - names)
        if foreign:
            raise UserError(f"--out {out} holds other files ({', '.join(foreign[:3])}): not replaced")
        for n in there:
            p = os.path.join(out, n)
            shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot write --out {out}: {e.strerror or e}") from None


def make_folders(out: str, what: str = "") -> None:
    """``out`` and a folder in it per table."""
    from analyzer.tables import TABLES

    try:
        for t in TABLES:
            os.makedirs(os.path.join(out, t.name), exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot write {what}{out}: {e.strerror or e}") from None


def write_tables(captures: tuple[str, ...], out: str, kw: dict[str, Any], trees: bool = False) -> dict[str, int]:
    """The tables of ``captures`` (read with the shared options ``kw``) as Parquet in
    ``out``'s table folders, made already: each table's rows written."""
    from analyzer.tables import EXCHANGES, TABLES, Table, open_writers, with_trees, write_rows

    tables: list[Table] = [with_trees(EXCHANGES) if trees else EXCHANGES, *TABLES[1:]]
    writers = open_writers(out, tables)
    # (lite with the requests' topics: the topic_partitions column reads them)
    decode = Decode.FULL if trees else lean_decode(kw["max_depth"], Decode.LITE_TOPICS)
    runs = iter_captures(captures, kw, progress=True, decode=decode, tables=decode.lean)
    damaged: list[tuple[str, str | None]] = []

    def named() -> Any:
        for path, run in runs:
            yield path, run
            damaged.append((path, run.summary.capture_warning))

    try:
        write_rows(named(), writers, trees)
    finally:
        for w in writers.values():
            w.close()
    for path, warning in damaged:
        warn_damaged(path, warning)
    return {n: w.count for n, w in writers.items()}
