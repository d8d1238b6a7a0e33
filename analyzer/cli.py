"""The kafkawire-sniff command line: the click group, its global options and error
handling; each command lives in a module of ``analyzer.commands``."""
from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from analyzer._core import CaptureError
from analyzer.errors import PROG, UserError, fail, reader_gone
from analyzer.model import pace_collector

# each command is ``<name>_command`` of ``analyzer.commands.<name>``, imported when it is run
# or listed: a command does not pay for the others' imports
COMMANDS = ("apis", "check", "export", "live", "read", "spark", "sql", "stats")


class Group(click.Group):
    """A click group whose usage errors are one line: ``kafkawire-sniff: error: ... (see --help)``,
    and whose commands (``COMMANDS``) are imported when asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        cmd = super().get_command(ctx, name)
        if cmd is None and name in COMMANDS:
            cmd = getattr(importlib.import_module(f"analyzer.commands.{name}"), f"{name}_command")
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
