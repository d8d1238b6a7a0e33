"""``kafkawire-sniff live``: capture from an interface and print exchanges as they complete.

Only wiring: the loop and the dashboard live in ``analyzer.live``, the formats in
``analyzer.sinks.output``. The lead registers ``live_command`` in the main group.
"""
from __future__ import annotations

import ipaddress
import sys
from typing import Any

import click
from click.core import ParameterSource

from analyzer.commands.options import capture_options, filter_option, options_from_kwargs
from analyzer.errors import UserError, stdout_console, stdout_to_devnull
from analyzer.runs import Decode, lean_decode

# series kept per metric family by `live --metrics` (analyzer.sinks.metrics.LiveMetrics)
DEFAULT_MAX_SERIES = 1000


class _Address(click.ParamType):
    """HOST:PORT of the metrics endpoint (``[::1]:9464``; ``:9464``: every interface)."""
    name = "HOST:PORT"

    def convert(self, value: Any, param: Any, ctx: Any) -> tuple[str, int]:
        if isinstance(value, tuple):
            return value
        text = str(value).strip()
        host, sep, port_text = text.rpartition(":")
        if not sep or not port_text:
            self.fail(f"{text!r} is not HOST:PORT (e.g. 127.0.0.1:9464)", param, ctx)
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
            try:
                ipaddress.IPv6Address(host)
            except ValueError:
                self.fail(f"{host!r} is not an IPv6 address", param, ctx)
        elif ":" in host or "[" in host or "]" in host:
            self.fail(f"{text!r} is not HOST:PORT (an IPv6 address goes in brackets: [::1]:9464)", param, ctx)
        if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
            self.fail(f"port {port_text!r} is not a number from 0 to 65535", param, ctx)
        return host or "0.0.0.0", int(port_text)


@click.command("live")
@click.option("-i", "--interface", "iface", metavar="IFACE",
              help="Interface to capture on (e.g. lo, eth0). `live` alone lists the available ones.")
@click.option("--bpf", metavar="EXPR",
              help="BPF capture filter; default: TCP to or from the --port ports (9092).")
@click.option("-f", "--format", "fmt", type=click.Choice(["summary", "tree", "ndjson"]), default=None,
              help="How each exchange is printed [default: summary; nothing with --stats unless given].")
@click.option("--stats", "show_stats", is_flag=True,
              help="Show a dashboard refreshed every second (rates, latency p50/p99 per API, errors, "
                   "top clients) and, at the end, its figures per API since the start.")
@click.option("-w", "--write", "write_path", type=click.Path(dir_okay=False), metavar="FILE.pcap",
              help="Also save the captured packets (pcap, nanosecond timestamps, the interface's link type).")
@click.option("-c", "--count", type=click.IntRange(min=1), help="Stop after N exchanges (that -Y selects).")
@click.option("-d", "--duration", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="Stop after this many seconds.")
@click.option("--timeout", "unanswered_timeout", type=click.FloatRange(min=0, min_open=True), default=30.0,
              show_default=True, metavar="SECONDS",
              help="Report a request as unanswered when no response came within this time.")
@click.option("--snaplen", type=click.IntRange(min=64, max=262144), default=262144, show_default=True,
              help="Bytes kept per packet.")
@click.option("-B", "--buffer-size", type=click.IntRange(min=1, max=2048), default=32, show_default=True,
              metavar="MiB", help="Kernel receive buffer for the capture socket.")
@click.option("--max-value-bytes", type=click.IntRange(min=1), default=64, show_default=True,
              help="Cut longer values in tree output.")
@click.option("--no-summary", is_flag=True, help="Do not print the closing summary.")
@click.option("--metrics", "metrics_at", type=_Address(), metavar="HOST:PORT",
              help="Serve the running figures at http://HOST:PORT/metrics (OpenMetrics, for Prometheus): "
                   "latency histograms per API, requests, errors, bytes, throttling, consumer lag, "
                   "connections and the capture's health. Nothing is printed per exchange unless -f is given.")
@click.option("--metrics-max-series", type=click.IntRange(min=1), default=DEFAULT_MAX_SERIES, show_default=True,
              metavar="N", help="Series kept per metric family; more client ids, topics or groups fold "
                                "into 'other' (counted by kafkawire_metrics_folded_series_total).")
@filter_option
@capture_options
def live_command(iface: str | None, bpf: str | None, fmt: str | None, show_stats: bool, write_path: str | None,
                 count: int | None, duration: float | None, unanswered_timeout: float, snaplen: int, buffer_size: int,
                 max_value_bytes: int, no_summary: bool, metrics_at: tuple[str, int] | None,
                 metrics_max_series: int, display_filter: Any, **kw: Any) -> int:
    """Capture Kafka traffic live and print each exchange as soon as its response arrives.

    Stops on Ctrl-C, SIGTERM, --count, --duration or when the reader of its output goes
    away, then prints the closing summary (after the dashboard's figures with --stats). With
    --metrics it is a monitor: Prometheus scrapes its figures while it runs. Exit status:
    130 after Ctrl-C, 143 after SIGTERM, 0 otherwise. Requests still waiting at the end are
    reported as unanswered, as `read` reports them at the end of the file --write saved.
    Capturing needs root or CAP_NET_RAW.
    """
    from analyzer import live

    if not iface:
        names = live.interfaces()
        if _options_given():
            raise UserError(f"choose an interface with -i (available: {', '.join(names) or 'none'})", 2)
        # (`live` alone: the interfaces it can capture on, one a line)
        for name in names:
            click.echo(name)
        return 0
    if metrics_at is None and _given("metrics_max_series"):
        raise UserError("--metrics-max-series needs --metrics HOST:PORT", 2)
    ports = tuple(kw.get("ports") or ()) or (9092,)
    if fmt is None:
        fmt = "none" if show_stats or metrics_at is not None else "summary"
    expr = bpf or live.port_filter(ports)
    # the socket first, and say so: the pipeline (the schema, the decoders) is built while
    # the kernel already queues the packets
    try:
        source = live.ScapySource(iface, expr, snaplen=snaplen, buffer_bytes=buffer_size * 1024 * 1024)
    except live.LiveError as e:
        raise UserError(str(e)) from None
    sink = None
    if write_path:
        try:
            sink = live.PcapSink(write_path, source.linktype, snaplen)
        except live.LiveError as e:
            source.close()
            raise UserError(str(e)) from None
    metrics = server = None
    if metrics_at is not None:
        from analyzer.sinks.metrics import LiveMetrics, MetricsError, MetricsServer

        metrics = LiveMetrics(metrics_max_series)
        try:
            server = MetricsServer(metrics, *metrics_at)
        except MetricsError as e:
            source.close()
            if sink is not None:
                sink.close()
            raise UserError(str(e)) from None
    click.echo(f"capturing on {iface} ({expr})" + (f", writing {write_path}" if write_path else "")
               + (f", metrics at {server.url}" if server is not None else "") + "; Ctrl-C to stop", err=True)
    try:
        # stats alone need only headers and the few body fields stats read; summary lines
        # the lean trees that say what full ones do
        decode = lean_decode(kw["max_depth"], Decode.lite(topics=fmt != "none")) \
            if fmt in ("none", "summary") else Decode.FULL
        options, ctx = options_from_kwargs(kw, decode=decode)
        options.unanswered_timeout = unanswered_timeout
        if metrics is not None:
            # (the Fetch asks' topic ids named as the run learns them: the same dict)
            metrics.lag.names = ctx.topic_names
        from analyzer.pipeline import Pipeline

        pipeline = Pipeline(options, ctx)
    except BaseException:
        source.close()
        if sink is not None:
            sink.close()
        if server is not None:
            server.close()
        raise

    printer = _Printer(fmt, max_value_bytes, pipeline)
    dash = live.Dashboard(f"live on {iface} ({expr})") if show_stats else None
    view = None
    err_console = None
    if dash is not None and sys.stderr.isatty():
        from rich.console import Console
        from rich.live import Live

        err_console = Console(stderr=True)
        view = Live(dash.renderable(), console=err_console, auto_refresh=False, transient=False,
                    redirect_stdout=sys.stdout.isatty(), redirect_stderr=False)

    def on_exchange(ex: Any) -> None:
        if dash is not None:
            dash.add(ex)
        if metrics is not None:
            metrics.add(ex)
        try:
            printer(ex)
        except BrokenPipeError:
            # the reader went away (``live ... | head``): stop capturing, print nothing more
            # on stdout, and still give the closing summary (on stderr)
            stdout_to_devnull()
            printer.fmt = "none"
            session.stop("output closed")

    def on_tick(now: float) -> None:
        if dash is not None:
            dash.packets = session.packets
            dash.dropped = getattr(source, "dropped", None)
        if view is not None and dash is not None:
            view.update(dash.renderable(now), refresh=True)
        if metrics is not None:
            metrics.capture(session.packets, getattr(source, "dropped", None), pipeline.summary,
                            pipeline.stream.open_conns)
            metrics.tick(now)

    session = live.LiveSession(pipeline, source, on_exchange, sink=sink, count=count, duration=duration,
                               on_tick=on_tick,
                               keep=display_filter.matcher(ctx) if display_filter is not None else None)
    if view is not None:
        view.start()
    try:
        result = session.run()
    finally:
        if view is not None and dash is not None:
            dash.packets = session.packets
            dash.dropped = getattr(source, "dropped", None)
            view.update(dash.renderable(), refresh=True)
            view.stop()
        if server is not None:
            server.close()
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        stdout_to_devnull()
        result.reason = "output closed"

    # the closing report goes where the exchanges did not: stderr for ndjson or when
    # the reader of stdout went away
    to_err = fmt == "ndjson" or result.reason == "output closed"
    if dash is not None:
        from analyzer.sinks.stats_render import PLAIN_WIDTH

        # the dashboard's figures as they stood at the stop (the packets and the kernel's
        # drops are in the summary below)
        console = stdout_console(stderr=to_err, highlight=False)
        if not console.is_terminal:
            console.width = PLAIN_WIDTH
        console.print(dash.report())
    if not no_summary:
        from analyzer.commands.options import summary_text

        head = (f"== live summary: stopped {stop_text(result.reason, result.exchanges, duration)}; "
                f"{result.packets} packets captured in {result.seconds:.1f} s")
        if result.written is not None:
            head += f", {result.written} written to {write_path}"
        if result.dropped:
            head += f"; {result.dropped} DROPPED by the kernel (try a larger --buffer-size)"
        lines = [head] + ["  " + line for line in summary_text(pipeline.summary, pipeline.ctx)]
        try:
            for line in lines:
                click.echo(line, err=to_err)
        except BrokenPipeError:      # stdout's reader went away while the summary was printed
            stdout_to_devnull()
            for line in lines:
                click.echo(line, err=True)
    return EXIT_STATUS.get(result.reason, 0)


def _given(name: str) -> bool:
    ctx = click.get_current_context()
    return ctx.get_parameter_source(name) not in (None, ParameterSource.DEFAULT)


def _options_given() -> bool:
    """Whether the command line gave `live` any option (not their defaults)."""
    ctx = click.get_current_context()
    return any(p.name is not None and ctx.get_parameter_source(p.name) not in (None, ParameterSource.DEFAULT)
               for p in ctx.command.params)


# how each way of stopping ends the process (README, "live"): a signal as shells report
# it (128 + the signal number), everything else 0
EXIT_STATUS = {"interrupted": 130, "terminated": 143}


def stop_text(reason: str, exchanges: int, duration: float | None) -> str:
    """Why the capture stopped, for the summary's first line."""
    if reason == "count":
        return f"after {exchanges} exchanges"
    if reason == "duration":
        return f"after {duration:g} s"
    return {"interrupted": "by Ctrl-C (SIGINT)", "terminated": "by SIGTERM", "source ended": "as the capture ended",
            "output closed": "as the reader of the output went away"}.get(reason, reason)


class _Printer:
    """Prints one exchange in the chosen format, flushing at once (this is live output)."""

    def __init__(self, fmt: str, max_value_bytes: int, pipeline: Any) -> None:
        self.fmt = fmt
        self.max_value_bytes = max_value_bytes
        self.pipeline = pipeline
        self.console: Any = None
        if fmt == "tree" and sys.stdout.isatty():
            from rich.console import Console
            self.console = Console()

    def __call__(self, ex: Any) -> None:
        fmt = self.fmt
        if fmt == "none":
            return
        out = sys.stdout
        if fmt == "ndjson":
            from analyzer.sinks.output import binary_writer, exchange_json_line

            binary_writer(out)(exchange_json_line(ex) + b"\n")
        elif fmt == "summary":
            from analyzer.sinks.output import summary_line

            out.write(summary_line(ex, self.pipeline.summary.first_ts) + "\n")
        else:
            self._tree(ex)
        out.flush()

    def _tree(self, ex: Any) -> None:
        from analyzer.sinks.output import rich_tree, summary_line, tree_lines

        head = summary_line(ex, self.pipeline.summary.first_ts)
        trees = [t for t in (ex.request_tree, ex.response_tree) if t is not None]
        if self.console is not None:
            from rich.markup import escape

            self.console.print(f"[bold green]{escape(head)}[/bold green]")
            if ex.notes:
                self.console.print("  [yellow]" + escape("; ".join(ex.notes)) + "[/yellow]")
            for t in trees:
                self.console.print(rich_tree(t, self.max_value_bytes))
            self.console.print()
            return
        w = sys.stdout.write
        w(head + "\n")
        if ex.notes:
            w("  notes: " + "; ".join(ex.notes) + "\n")
        for t in trees:
            w("\n".join(tree_lines(t, self.max_value_bytes, "  ")) + "\n")
        w("\n")
