"""The kafkawire-sniff command line: parses options and wires stages, nothing more."""
from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from typing import Any

import click

from analyzer._core import CaptureError
from analyzer.commands.options import (
    capture_options,
    filter_option,
    fresh_context,
    lean_decode,
    options_from_kwargs,
)
from analyzer.errors import UserError, fail, reader_gone, stdout_console
from analyzer.model import Exchange, pace_collector
from analyzer.sinks.output import detection_lines

PROG = "kafkawire-sniff"


# the commands that live in their own modules (each owns its options and output), imported
# when they are run or listed: a command does not pay for the others' imports
COMMAND_MODULES = {"stats": "analyzer.commands.stats", "check": "analyzer.commands.check",
                   "live": "analyzer.commands.live", "spark": "analyzer.commands.spark",
                   "export": "analyzer.commands.export", "sql": "analyzer.commands.sql"}


class Group(click.Group):
    """A click group whose usage errors are one line: ``kafkawire-sniff: error: ... (see --help)``,
    and whose commands of ``COMMAND_MODULES`` are imported when asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMAND_MODULES})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        cmd = super().get_command(ctx, name)
        if cmd is None and name in COMMAND_MODULES:
            import importlib

            cmd = getattr(importlib.import_module(COMMAND_MODULES[name]), f"{name}_command")
            self.add_command(cmd)
        return cmd

    def main(self, *args: Any, **kwargs: Any) -> Any:  # noqa: D401
        kwargs["standalone_mode"] = False
        try:
            rv = super().main(*args, **kwargs)
        except click.exceptions.NoArgsIsHelpError as e:
            click.echo(e.ctx.get_help())
            sys.exit(0)
        except click.UsageError as e:
            cmd = e.ctx.command_path if e.ctx else PROG
            click.echo(f"{PROG}: error: {usage_message(e.format_message(), cmd)}", err=True)
            sys.exit(2)
        except click.exceptions.Abort:
            click.echo(f"{PROG}: interrupted", err=True)
            sys.exit(130)
        except click.exceptions.Exit as e:
            sys.exit(e.exit_code)
        except UserError as e:
            fail(str(e), e.exit_code)
        except CaptureError as e:
            fail(str(e))
        except BrokenPipeError:
            reader_gone()
        if isinstance(rv, int):
            sys.exit(rv)
        sys.exit(0)

    def invoke(self, ctx: click.Context) -> Any:
        # before click's own EPIPE handling, which exits 1
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            reader_gone()


def usage_message(text: str, cmd: str) -> str:
    """A usage error in our style, whoever wrote it (click or a command): lower-case, no
    full stop, and one hint: its own ``(see ...)``, else the command's --help."""
    text = text.strip().rstrip(".")
    if text[:1].isupper() and text[1:2].islower():
        text = text[0].lower() + text[1:]
    return text if "(see " in text else f"{text} (see '{cmd} --help')"


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="kafkawire-sniff", prog_name=PROG)
def main() -> None:
    """Show what Kafka clients and brokers really say to each other.

    Reads pcap/pcapng captures (or a live interface), reassembles TCP, pairs each
    request with its response and dissects every field.
    """
    pace_collector()        # (the modules loaded by now stay for the whole run: frozen)


def _stdout_is_tty() -> bool:
    return sys.stdout.isatty()


def _progress(enabled: bool) -> tuple[Callable[[int, int], None] | None, Callable[[], None]]:
    """A progress bar on stderr for big captures on a terminal: (update, close)."""
    if not enabled or not sys.stderr.isatty():
        return None, lambda: None
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

    prog = Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(),
                    TimeRemainingColumn(), transient=True, console=_stderr_console())
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


def _stderr_console() -> Any:
    from rich.console import Console
    return Console(stderr=True)


def iter_captures(paths: tuple[str, ...], kw: dict[str, Any], progress: bool = True,
                  decode: str = "full") -> Iterator[tuple[str, Any]]:
    """(path, Run) for each capture, with the shared options and a decode mode applied.
    Every path is checked before the first is read (``check_captures``): a missing file or
    one that is not a capture stops the command before it prints anything."""
    from analyzer.commands.options import check_captures
    from analyzer.pipeline import Run

    check_captures(paths)
    options, ctx = options_from_kwargs(kw, decode=decode)
    for path in paths:
        update, close = _progress(progress)
        run = Run(path, options, fresh_context(ctx), progress=update)
        try:
            yield path, run
        finally:
            close()


def _api_filter(api: tuple[str, ...]) -> str | None:
    """``--api`` names (any case) or keys as a filter; an unknown name is a usage error."""
    from analyzer.display_filter import API_NAMES, quote

    by_lower: dict[str, list[str]] = {}
    for n in API_NAMES:
        by_lower.setdefault(n.lower(), []).append(n)
    keys: list[int] = []
    names: list[str] = []
    for a in api:
        text = a.strip()
        if text.lstrip("-").isdigit():
            keys.append(int(text))
        elif text.lower() in by_lower:
            names.extend(by_lower[text.lower()])
        else:
            import difflib
            close = difflib.get_close_matches(text, API_NAMES, n=3, cutoff=0.6)
            hint = f"did you mean {' or '.join(close)}? " if close else ""
            raise UserError(f"--api: unknown API {text!r} ({hint}valid: {', '.join(API_NAMES)}, or an API key)", 2)
    parts = []
    if names:
        parts.append("api_name in {" + " ".join(quote(n) for n in dict.fromkeys(names)) + "}")
    if keys:
        parts.append("api_key in {" + " ".join(map(str, dict.fromkeys(keys))) + "}")
    return " || ".join(parts) or None


def read_selection(api: tuple[str, ...], client_id: str | None, conn: tuple[int, ...], errors_only: bool,
                   display_filter: Any) -> Any:
    """The one DisplayFilter of read's options (--api, --client-id, --conn, --errors-only, -Y), or None."""
    if not api and client_id is None and not conn and not errors_only and display_filter is None:
        return None         # (without importing the filter language: a fifth of a small read's time)
    from analyzer.display_filter import all_of, compile_filter, quote

    parts = [_api_filter(api)]
    if client_id is not None:
        parts.append(f"client_id == {quote(client_id)}")
    if conn:
        parts.append("conn in {" + " ".join(map(str, conn)) + "}")
    if errors_only:
        parts.append("error || status != ok")
    filters = [compile_filter(p) for p in parts if p is not None]
    if display_filter is not None:
        filters.append(display_filter)
    return all_of(filters)


# the kinds of connection in the summary, each connection counted once (see Summary)
CONNECTION_KINDS = (("kafka_connections", "kafka"), ("kafka_tls_connections", "kafka in decrypted TLS"),
                    ("tls_connections", "TLS not decrypted"), ("other_connections", "unidentified TCP"),
                    ("empty_connections", "no payload"))


def connection_kinds(d: dict[str, Any]) -> str:
    """``kafka 3, no payload 1``: the kinds there are, each connection in one of them."""
    return ", ".join(f"{name} {d[key]}" for key, name in CONNECTION_KINDS if d.get(key))


def summary_text(summary: Any, ctx: Any) -> list[str]:
    d = summary.to_json(ctx)
    ex = d["exchanges"]
    kinds = connection_kinds(d)
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


@main.command("read")
@click.argument("captures", nargs=-1, required=True, type=click.Path())
@click.option("-f", "--format", "fmt", type=click.Choice(["summary", "tree", "ndjson", "json"]),
              default="summary", show_default=True, help="Output format.")
@click.option("--api", multiple=True, help="Only this API (name or key); repeatable.")
@click.option("--client-id", help="Only exchanges from this client_id.")
@click.option("--conn", multiple=True, type=int, help="Only this connection number; repeatable.")
@click.option("--errors-only", is_flag=True, help="Only exchanges with error codes or a status other than ok.")
@filter_option
@click.option("--frame", "frames", multiple=True, type=click.IntRange(min=1), metavar="N",
              help="Only the exchange(s) whose request or response includes packet N (as Wireshark "
                   "numbers packets); repeatable.")
@click.option("--max-value-bytes", type=click.IntRange(min=1), default=64, show_default=True,
              help="Cut longer values in tree output.")
@click.option("--no-summary", is_flag=True, help="Do not print the closing summary.")
@click.option("-x", "--hex", "hexdump", is_flag=True,
              help="Also dump each selected frame's bytes (hex and ASCII, the fields named beside them).")
@click.option("-w", "--write", "write_to", type=click.Path(dir_okay=False), metavar="OUT",
              help="Also write the packets of the selected exchanges, with their connections' "
                   "handshakes, to the capture file OUT (one capture in).")
@capture_options
def read_cmd(captures: tuple[str, ...], fmt: str, api: tuple[str, ...], client_id: str | None,
             conn: tuple[int, ...], errors_only: bool, display_filter: Any, frames: tuple[int, ...],
             max_value_bytes: int, no_summary: bool, hexdump: bool, write_to: str | None, **kw: Any) -> int:
    """Decode captures: one line per exchange, field trees, or JSON."""
    if hexdump and fmt in ("ndjson", "json"):
        raise click.UsageError(f"-x dumps bytes under summary lines or trees, not with -f {fmt}")
    if write_to is not None and len(captures) != 1:
        raise click.UsageError("-w writes the cut of one capture: give one capture")
    selection = read_selection(api, client_id, conn, errors_only, display_filter)
    cut = None
    if write_to is not None:
        from analyzer.commands.options import check_captures
        from analyzer.sinks.pcapwrite import CutCapture
        check_captures(captures)
        cut = CutCapture(write_to, captures[0])
    dumped = 0
    frame_notes: list[str] = []
    out = sys.stdout
    tty = _stdout_is_tty()
    console = None
    if fmt == "tree" and tty:
        from rich.console import Console
        console = Console()
    first_json = True
    # (ndjson and json lines are UTF-8 bytes: they go to stdout's binary buffer)
    write_bytes: Callable[[bytes], object] | None = None
    if fmt in ("ndjson", "json"):
        from analyzer.sinks.output import binary_writer
        write_bytes = binary_writer(out)
    if write_bytes is not None and fmt == "json":
        write_bytes(b"[")
    decode = lean_decode(kw["max_depth"], "lite-topics") if fmt == "summary" and not hexdump else "full"
    for path, run in iter_captures(captures, kw, decode=decode):
        t0: float | None = None
        keep = selection.matcher(run.ctx) if selection is not None else None
        at_frames = None
        if frames:
            from analyzer.display_filter import frame_selector
            at_frames, notes = frame_selector(path, frames)
            for note in notes:
                if hexdump:         # (-x: said once, as the error when nothing is dumped)
                    frame_notes.append(f"{path}: {note}")
                else:
                    click.echo(f"{PROG}: {path}: {note}", err=True)
        for ex in run:
            if t0 is None:
                t0 = run.summary.first_ts
            if at_frames is not None and not at_frames(ex):
                continue
            if keep is not None and not keep(ex):
                continue
            if cut is not None:
                cut.add(ex, tls=any(t["conn"] == ex.conn.id for t in run.summary.tls))
            if fmt == "summary":
                from analyzer.sinks.output import summary_line
                out.write(summary_line(ex, t0) + "\n")
            elif write_bytes is not None:
                from analyzer.sinks.output import exchange_json_line
                js = exchange_json_line(ex, source=path if len(captures) > 1 else None)
                if fmt == "json":
                    write_bytes((b"\n" if first_json else b",\n") + js)
                    first_json = False
                else:
                    write_bytes(js + b"\n")
            else:
                _print_tree(ex, t0, console, max_value_bytes)
            if hexdump:
                from analyzer.sinks.hexdump import exchange_dump
                out.write("\n".join(exchange_dump(ex.request, ex.request_tree, ex.response,
                                                  ex.response_tree)) + "\n\n")
                dumped += 1
        if not no_summary:
            lines = summary_text(run.summary, run.ctx)
            to_err = fmt in ("ndjson", "json")
            header = f"== {path}" if len(captures) > 1 else "=="
            click.echo(header + " summary", err=to_err)
            for line in lines:
                click.echo("  " + line, err=to_err)
    if write_bytes is not None and fmt == "json":
        write_bytes(b"\n]\n")
    if cut is not None:
        written, total = cut.write(captures[0])
        click.echo(f"{PROG}: wrote {write_to}: {written} packets of {total} "
                   "(packet numbers differ from the capture's)", err=True)
    if hexdump and not dumped:
        why = "; ".join(frame_notes) or "no exchange selected"
        raise UserError(f"-x: no Kafka frame to dump ({why})")
    return 0


def _print_tree(ex: Exchange, t0: float | None, console: Any, max_value_bytes: int) -> None:
    from analyzer.sinks.output import rich_tree, summary_line, tree_lines

    head = summary_line(ex, t0)
    if console is not None:
        from rich.markup import escape
        console.print(f"[bold green]{escape(head)}[/bold green]")
        if ex.notes:
            console.print("  [yellow]" + escape("; ".join(ex.notes)) + "[/yellow]")
        for t in (ex.request_tree, ex.response_tree):
            if t is not None:
                console.print(rich_tree(t, max_value_bytes))
        console.print()
        return
    w = sys.stdout.write
    w(head + "\n")
    if ex.notes:
        w("  notes: " + "; ".join(ex.notes) + "\n")
    for t in (ex.request_tree, ex.response_tree):
        if t is not None:
            w("\n".join(tree_lines(t, max_value_bytes, "  ")) + "\n")
    w("\n")


@main.command("apis")
@click.option("-f", "--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def apis_cmd(fmt: str) -> int:
    """List the Kafka API keys and versions we decode."""
    from dissectors.kafka import list_apis

    rows = list_apis()
    if fmt == "json":
        click.echo(json.dumps(rows, indent=1))
        return 0
    from rich.table import Table

    table = Table(title=f"{len(rows)} Kafka API keys")
    for col in ("api_key", "name", "versions", "flexible from"):
        table.add_column(col)
    for r in rows:
        flex = r.get("flexible_from")
        table.add_row(str(r["api_key"]), r["name"], f"{r['min_version']}-{r['max_version']}",
                      "-" if flex is None else f"v{flex}")
    stdout_console().print(table)
    return 0
