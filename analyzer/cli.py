"""The kafkawire-sniff command line: parses options and wires stages, nothing more."""
from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from typing import Any

import click

from analyzer.capture import CaptureError
from analyzer.errors import UserError, fail, reader_gone, stdout_console
from analyzer.model import Exchange
from analyzer.options import capture_options, fresh_context, options_from_kwargs

PROG = "kafkawire-sniff"


class Group(click.Group):
    """A click group whose usage errors are one line: ``kafkawire-sniff: error: ... (see --help)``."""

    def main(self, *args: Any, **kwargs: Any) -> Any:  # noqa: D401
        kwargs["standalone_mode"] = False
        try:
            rv = super().main(*args, **kwargs)
        except click.exceptions.NoArgsIsHelpError as e:
            click.echo(e.ctx.get_help())
            sys.exit(0)
        except click.UsageError as e:
            cmd = e.ctx.command_path if e.ctx else PROG
            click.echo(f"{PROG}: error: {e.format_message()} (see '{cmd} --help')", err=True)
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


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="kafkawire-sniff", prog_name=PROG)
def main() -> None:
    """Show what Kafka clients and brokers really say to each other.

    Reads pcap/pcapng captures (or a live interface), reassembles TCP, pairs each
    request with its response and dissects every field.
    """


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
    """(path, Run) for each capture, with the shared options and a decode mode applied."""
    from analyzer.pipeline import Run

    options, ctx = options_from_kwargs(kw, decode=decode)
    options.keep_conns = False      # exchanges carry their Conn; the reassembler need not keep them all
    for path in paths:
        update, close = _progress(progress)
        run = Run(path, options, fresh_context(ctx), progress=update)
        try:
            yield path, run
        finally:
            close()


def _matches(ex: Exchange, api: tuple[str, ...], client_id: str | None, conn: tuple[int, ...],
             errors_only: bool) -> bool:
    if api and ex.api_name.lower() not in api and str(ex.api_key) not in api:
        return False
    if client_id is not None and ex.client_id != client_id:
        return False
    if conn and ex.conn.id not in conn:
        return False
    if errors_only and not (ex.error_codes or ex.status != "ok"):
        return False
    return True


def summary_text(summary: Any, ctx: Any) -> list[str]:
    d = summary.to_json(ctx)
    ex = d["exchanges"]
    lines = [
        f"packets: {d['packets']}"
        + (f" (not analysed: {', '.join(f'{k} {v}' for k, v in sorted(d['packets_skipped'].items()))})"
           if d["packets_skipped"] else ""),
        f"connections: {d['connections']} (kafka {d['kafka_connections']}, tls {d['tls_connections']}, "
        f"other {d['other_connections']})",
        f"kafka frames: {d['request_frames']} requests, {d['response_frames']} responses"
        + (f", {d['truncated_frames']} truncated in the capture" if d["truncated_frames"] else ""),
        "exchanges: " + (", ".join(f"{k} {v}" for k, v in sorted(ex.items())) or "none"),
    ]
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
@click.option("--max-value-bytes", type=click.IntRange(min=1), default=64, show_default=True,
              help="Cut longer values in tree output.")
@click.option("--no-summary", is_flag=True, help="Do not print the closing summary.")
@capture_options
def read_cmd(captures: tuple[str, ...], fmt: str, api: tuple[str, ...], client_id: str | None,
             conn: tuple[int, ...], errors_only: bool, max_value_bytes: int, no_summary: bool, **kw: Any) -> int:
    """Decode captures: one line per exchange, field trees, or JSON."""
    api_l = tuple(a.lower() for a in api)
    out = sys.stdout
    tty = _stdout_is_tty()
    console = None
    if fmt == "tree" and tty:
        from rich.console import Console
        console = Console()
    first_json = True
    if fmt == "json":
        out.write("[")
    for path, run in iter_captures(captures, kw):
        t0: float | None = None
        for ex in run:
            if t0 is None:
                t0 = run.summary.first_ts
            if not _matches(ex, api_l, client_id, conn, errors_only):
                continue
            if fmt == "summary":
                from analyzer.output import summary_line
                out.write(summary_line(ex, t0) + "\n")
            elif fmt in ("ndjson", "json"):
                from analyzer.output import exchange_json_line
                text = exchange_json_line(ex, source=path if len(captures) > 1 else None)
                if fmt == "json":
                    out.write(("\n" if first_json else ",\n") + text)
                    first_json = False
                else:
                    out.write(text + "\n")
            else:
                _print_tree(ex, t0, console, max_value_bytes)
        if not no_summary:
            lines = summary_text(run.summary, run.ctx)
            to_err = fmt in ("ndjson", "json")
            header = f"== {path}" if len(captures) > 1 else "=="
            click.echo(header + " summary", err=to_err)
            for line in lines:
                click.echo("  " + line, err=to_err)
    if fmt == "json":
        out.write("\n]\n")
    return 0


def _print_tree(ex: Exchange, t0: float | None, console: Any, max_value_bytes: int) -> None:
    from analyzer.output import rich_tree, summary_line, tree_lines

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


def _register_optional() -> None:
    """Commands that live in their own modules (each owns its options and output)."""
    import importlib

    for mod, attr in (("analyzer.cmd_stats", "stats_command"), ("analyzer.cmd_check", "check_command"),
                      ("analyzer.cmd_live", "live_command"), ("analyzer.cmd_spark", "spark_command")):
        try:
            m = importlib.import_module(mod)
        except ImportError as e:
            if e.name != mod:
                raise
            continue
        main.add_command(getattr(m, attr))


_register_optional()
