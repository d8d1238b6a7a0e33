"""The core's test probes (``analyzer._core.probe_*``: one header check, varint or records
summary called at a time). They are built only with the core's cargo feature ``probe``,
which tests/run.sh turns on; the released module has none. A test that calls one where
the core was built without them is skipped, with that reason."""
from __future__ import annotations

from typing import Any

import pytest

from analyzer import _core

WHY = ("the native core was built without its test probes (cargo feature `probe`; "
       "tests/run.sh builds with MATURIN_PEP517_ARGS='--features probe')")


class _Probes:
    def __getattr__(self, name: str) -> Any:
        if not name.startswith("probe_"):       # (pytest looks for its own names here)
            raise AttributeError(name)
        f = getattr(_core, name, None)
        if f is None:
            pytest.skip(WHY)
        return f


probes = _Probes()
