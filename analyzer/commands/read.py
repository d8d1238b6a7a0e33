"""``kafkawire-sniff read``: the exchanges its options select, one line each, as field
trees or as JSON. Only wiring: the output comes from ``analyzer.sinks`` (output, hexdump,
pcapwrite)."""
from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import click

from analyzer.commands.options import (
    capture_options,
    check_captures,
    filter_option,
    iter_captures,
    summary_text,
)
from analyzer.errors import PROG, UserError
from analyzer.model import Exchange
from analyzer.runs import Decode, lean_decode
from analyzer.sinks.output import binary_writer, exchange_json_line, rich_tree, summary_line, tree_lines


@click.command("read")
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
def read_command(captures: tuple[str, ...], fmt: str, api: tuple[str, ...], client_id: str | None,
                 conn: tuple[int, ...], errors_only: bool, display_filter: Any, frames: tuple[int, ...],
                 max_value_bytes: int, no_summary: bool, hexdump: bool, write_to: str | None,
                 **kw: Any) -> int:
    """Decode captures: one line per exchange, field trees, or JSON."""
    if hexdump and fmt in ("ndjson", "json"):
        raise click.UsageError(f"-x dumps bytes under summary lines or trees, not with -f {fmt}")
    if write_to is not None and len(captures) != 1:
        raise click.UsageError("-w writes the cut of one capture: give one capture")
    selection = read_selection(api, client_id, conn, errors_only, display_filter)
    cut = None
    if write_to is not None:
        from analyzer.sinks.pcapwrite import CutCapture
        check_captures(captures)
        cut = CutCapture(write_to, captures[0])
    dumped = 0
    frame_notes: list[str] = []
    out = sys.stdout
    console = None
    if fmt == "tree" and sys.stdout.isatty():
        from rich.console import Console
        console = Console()
    first_json = True
    # (ndjson and json lines are UTF-8 bytes: they go to stdout's binary buffer)
    write_bytes: Callable[[bytes], object] | None = None
    if fmt in ("ndjson", "json"):
        write_bytes = binary_writer(out)
    if write_bytes is not None and fmt == "json":
        write_bytes(b"[")
    decode = lean_decode(kw["max_depth"], Decode.LITE_TOPICS) if fmt == "summary" and not hexdump else Decode.FULL
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
                out.write(summary_line(ex, t0) + "\n")
            elif write_bytes is not None:
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
        written, total = cut.write(captures[0], run.summary.linktypes, run.summary.fine_times,
                                   run.pipeline.new_stream())
        click.echo(f"{PROG}: wrote {write_to}: {written} packets of {total} "
                   "(packet numbers differ from the capture's)", err=True)
    if hexdump and not dumped:
        why = "; ".join(frame_notes) or "no exchange selected"
        raise UserError(f"-x: no Kafka frame to dump ({why})")
    return 0


def _print_tree(ex: Exchange, t0: float | None, console: Any, max_value_bytes: int) -> None:
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
