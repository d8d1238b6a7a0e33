"""Shared fixtures: where the samples and the shared captures are."""
from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "samples"
SHARED = REPO.parent / "shared"
SHARED_CAPTURES = SHARED / "captures"


def shared_captures() -> Path:
    if not SHARED_CAPTURES.is_dir():
        pytest.skip("../shared/captures is not present")
    return SHARED_CAPTURES


def capture_paths() -> list[Path]:
    """The samples' captures, and the shared ones when ../shared is beside the clone."""
    paths = sorted(SAMPLES.glob("*.pcap*"))
    if SHARED_CAPTURES.is_dir():
        paths += sorted(SHARED_CAPTURES.rglob("*.pcap*"))
    return paths
