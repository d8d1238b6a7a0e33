"""User-facing errors: one line on stderr, a non-zero exit, never a traceback."""
from __future__ import annotations

import sys
from typing import NoReturn

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
