"""User-facing errors: one line on stderr, a non-zero exit, never a traceback."""
from __future__ import annotations

import os
import sys
from typing import Any, NoReturn

PROG = "kafkawire-sniff"


class UserError(Exception):
    """Bad user input (missing file, not a capture, unknown interface...): exit 1."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def fail(message: str, exit_code: int = 1) -> NoReturn:
    sys.stderr.write(f"{PROG}: error: {message}\n")
    sys.stderr.flush()
    sys.exit(exit_code)


def warn_damaged(path: str, warning: str | None) -> None:
    """A damaged capture (cut short, bad record): the figures or findings cover what was
    read; say so on stderr, as ``read`` says it in its summary."""
    if warning:
        sys.stderr.write(f"warning: {path}: {warning}\n")
        sys.stderr.flush()


def stdout_to_devnull() -> None:
    """Point fd 1 at /dev/null once its reader went away: later writes and the final
    flush of stdout must not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        fd = sys.stdout.fileno()
        if devnull != fd:
            os.dup2(devnull, fd)
            os.close(devnull)
    except (OSError, ValueError):
        pass


def reader_gone() -> NoReturn:
    """The reader of our output went away (``... | head``): stop quietly with exit 0, as
    other filters do."""
    stdout_to_devnull()
    sys.exit(0)


def stdout_console(**kw: Any) -> Any:
    """A rich Console (on stdout unless ``stderr=True``) that stops like ``reader_gone``
    when its reader goes away (rich itself would exit 1)."""
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            reader_gone()

    return _Console(**kw)
