"""Shrink the decoder's module-level bounds for one test, so that its caches turn
generations many times over within a few thousand messages."""

from __future__ import annotations

import pytest

from capwatch.contracts import wire_atoms


def shrink_decoder(monkeypatch: pytest.MonkeyPatch, *, atoms: int, pieces: int,
                   state_bytes: int | None = None) -> None:
    """Set the vocabulary's, the pieces' and (if given) the state-text cache's bounds
    for the test, and start from an empty vocabulary (monkeypatch restores the bounds;
    the test itself forgets what it learnt)."""
    monkeypatch.setattr(wire_atoms, "MAX_ATOMS", atoms)
    monkeypatch.setattr(wire_atoms, "MAX_PIECES", pieces)
    if state_bytes is not None:
        monkeypatch.setattr(wire_atoms, "MAX_STATE_BYTES", state_bytes)
    wire_atoms.forget()
