"""Options shared by every command that reads captures (read, stats, check, live, spark)."""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

from dissectors.context import DecodeContext

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


# the decoders' nesting limit unless --max-depth says otherwise (DecodeContext's default)
DEFAULT_MAX_DEPTH = DecodeContext().max_depth

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
    click.option("--max-array-len", type=click.IntRange(min=1), default=1_000_000, show_default=True,
                 help="Largest array element count accepted from the wire."),
    click.option("--max-depth", type=click.IntRange(min=1), default=DEFAULT_MAX_DEPTH, show_default=True,
                 help="Deepest nesting of structures decoded from the wire."),
    click.option("--tls-keylog", type=click.Path(dir_okay=False),
                 help="SSLKEYLOGFILE (NSS key log) to decrypt TLS 1.2/1.3 connections and dissect the Kafka inside."),
    click.option("--show-secrets", is_flag=True,
                 help="Show SASL passwords, tokens and secret config values instead of redacting them."),
]


def capture_options(f: Callable[..., Any]) -> Callable[..., Any]:
    for opt in reversed(CAPTURE_OPTIONS):
        f = opt(f)

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return f(*args, **kwargs)
    return wrapper


CAPTURE_OPTION_NAMES = ("ports", "no_autodetect", "protocol", "max_frame_size", "max_decompressed",
                        "max_array_len", "max_depth", "show_secrets", "tls_keylog")


def check_captures(paths: tuple[str, ...]) -> None:
    """Each path names a capture we can read: a regular file is opened and its header read
    (cheap), anything else (a pipe, ``<(zcat x.pcap)``) only looked up, as reading its
    header would consume it. Every bad path is named, one line each; CaptureError for the last."""
    import os

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


def lean_decode(max_depth: int, lean: str) -> str:
    """The decode mode of a command whose output lean trees give as full trees would
    (``lean``: ``lite`` for `stats` and `live --stats`, ``lite-topics`` for the summary
    lines of `read` and `live` and `stats` grouped by topic, ``lite-check`` for `check` and
    the Spark job), unless a lowered --max-depth asks for full trees (the
    full decoder can hit it; the lean walk has no depth limit and the schema nests less
    deep than the default). A display filter reads lean trees too: it decodes full trees
    for the exchanges that reach a test of a tree field (analyzer.display_filter)."""
    return lean if max_depth >= DEFAULT_MAX_DEPTH else "full"


def options_from_kwargs(kw: dict[str, Any], decode: str = "full") -> tuple[Options, DecodeContext]:
    """Build pipeline Options and a DecodeContext from the shared options (removing them from kw)."""
    from analyzer.pipeline import Options

    g = {k: kw.pop(k) for k in CAPTURE_OPTION_NAMES if k in kw}
    opts = Options(
        ports=tuple(g.get("ports") or ()) or (9092,),
        autodetect=not g.get("no_autodetect", False),
        protocol=g.get("protocol", "auto"),
        decode=decode,
        max_frame_size=g.get("max_frame_size", 100 * 1024 * 1024),
        tls_keylog=_keylog(g.get("tls_keylog")),
    )
    ctx = DecodeContext(
        max_frame_size=opts.max_frame_size,
        max_decompressed=g.get("max_decompressed", 64 * 1024 * 1024),
        max_array_len=g.get("max_array_len", 1_000_000),
        max_depth=g.get("max_depth", DEFAULT_MAX_DEPTH),
        show_secrets=g.get("show_secrets", False),
    )
    return opts, ctx


def _keylog(path: str | None) -> Any:
    if not path:
        return None
    from analyzer.tlsdecrypt import TlsKeyLog
    return TlsKeyLog.load(path)


def fresh_context(template: DecodeContext) -> DecodeContext:
    """A new context with the template's limits and presentation, and zeroed counters."""
    return DecodeContext(
        max_frame_size=template.max_frame_size,
        max_decompressed=template.max_decompressed,
        max_array_len=template.max_array_len,
        max_depth=template.max_depth,
        show_secrets=template.show_secrets,
        decode_records=template.decode_records,
    )


def _compile_filter(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    if value is None:
        return None
    from analyzer.display_filter import FilterError, compile_filter
    from analyzer.errors import UserError

    try:
        return compile_filter(value)
    except FilterError as e:
        raise UserError(f"-Y: {e}", 2) from None


def filter_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """``-Y/--filter EXPR``: the display filter (``analyzer.display_filter``), compiled."""
    return click.option("-Y", "--filter", "display_filter", metavar="EXPR", callback=_compile_filter,
                        help="Only exchanges this display filter selects, e.g. "
                             "'api_name == JoinGroup && latency_ms > 250' (see the README).")(f)
