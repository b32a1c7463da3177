"""A compact, versioned form of one agent's drift state, to outlive a restart or a
partition move (the daemon stores it in the models store; this module does no I/O).

An agent's drift state is, per lifted action: the outcome window (the retained outcome
indices, oldest first), the sequential detector's running statistics and the progress of
a confirmation after an alarm. Restoring it gives a monitor that continues exactly like
the original: the same alarm at the same step, with the same evidence.

The form is a JSON object::

    {"format": "capwatch.drift-state", "version": 1, "model": {...} | null,
     "actions": {"move-car": {"fingerprint": "…", "seen": 812, "values": "<zlib+b64>", …}}}

- ``model`` is opaque here: the daemon puts the model version the tables were counted
  against and refuses a snapshot for any other version.
- ``fingerprint`` digests the action's outcomes and probabilities, so state is never
  restored into a different version of an action even if ``model`` was not checked.
- Outcome windows are bytes (one per execution, index + 1, 0 = ambiguous), deflated and
  base64-encoded: a full 2,000-execution window of a two-outcome action takes a few
  hundred characters. Detector statistics are little-endian float64/int64 arrays in
  base64, which round-trips every bit (decimal text would too, at twice the size).

Keys other than these are the caller's and are ignored here: the daemon adds its watch's
back-off under ``backoff`` (``capwatch.daemon.checkpoint.backoff_state``), optional, so
snapshots without it read as before and a reader that does not know it ignores it.

Readers refuse a snapshot whose ``format`` or ``version`` they do not know
(:class:`SnapshotError`), and callers then start afresh: losing soft state costs
detection delay, never correctness.
"""

from __future__ import annotations

import base64
import binascii
import struct
import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from capwatch.model.domain import Action
from capwatch.monitor.compact_bytes import decompress
from capwatch.monitor.drift import ActionMonitor, DriftConfig, DriftMonitor

FORMAT = "capwatch.drift-state"
VERSION = 1


class SnapshotError(ValueError):
    """A snapshot this version of capwatch cannot read; the message says why."""


def _b64(data: bytes) -> str:
    return binascii.b2a_base64(data, newline=False).decode("ascii")


def _unb64(text: Any) -> bytes:
    if not isinstance(text, str):
        raise SnapshotError(f"expected base64 text, found {type(text).__name__}")
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError) as e:
        raise SnapshotError(f"bad base64: {e}") from e


# Checkpoints write a snapshot of every agent whose tables changed, on the main loop, and
# most of them (agents admitted since the last one, above all) hold a few values per
# array: struct packs those in a fraction of numpy's fixed cost per call, to the same bytes.

def _pack_floats(values: list[float] | npt.NDArray[np.float64]) -> str:
    if isinstance(values, np.ndarray):
        return _b64(values.astype("<f8", copy=False).tobytes())
    return _b64(struct.pack(f"<{len(values)}d", *values))


def _unpack_floats(text: Any) -> list[float]:
    raw = _unb64(text)
    if len(raw) % 8:
        raise SnapshotError("float array length is not a multiple of 8 bytes")
    return [float(v) for v in np.frombuffer(raw, dtype="<f8")]


def _pack_ints(values: list[int] | npt.NDArray[np.int64]) -> str:
    if isinstance(values, np.ndarray):
        return _b64(values.astype("<i8", copy=False).tobytes())
    return _b64(struct.pack(f"<{len(values)}q", *values))


def _unpack_ints(text: Any) -> list[int]:
    raw = _unb64(text)
    if len(raw) % 8:
        raise SnapshotError("integer array length is not a multiple of 8 bytes")
    return [int(v) for v in np.frombuffer(raw, dtype="<i8")]


_SMALL_WINDOW = 64
"""Outcome windows up to this long are packed without numpy, and their deflated bytes
are remembered (:data:`_DEFLATED`): a window that short holds few distinct values, and
deflating even one byte costs microseconds (zlib sets up its whole state per call)."""
_DEFLATED: dict[bytes, str] = {}


def _pack_outcomes(values: list[int] | npt.NDArray[np.int64]) -> str:
    if len(values) <= _SMALL_WINDOW:
        items = values.tolist() if isinstance(values, np.ndarray) else list(values)
        if items and (min(items) < -1 or max(items) > 254):
            raise ValueError("outcome indices must be in [-1, 254] to pack")
        raw = bytes([v + 1 for v in items])
        packed = _DEFLATED.get(raw)
        if packed is None:
            if len(_DEFLATED) >= 4096:
                _DEFLATED.clear()  # a bound on memory
            packed = _DEFLATED[raw] = _b64(zlib.compress(raw, 1))
        return packed
    shifted = np.asarray(values, dtype=np.int64) + 1
    if shifted.size and (shifted.min() < 0 or shifted.max() > 255):
        raise ValueError("outcome indices must be in [-1, 254] to pack")
    # Level 1: a full window of a two-outcome action in 9.6 µs and 426 bytes, against
    # 94 µs and 311 bytes at level 6. Checkpoints write the snapshot of every agent whose
    # tables changed, on the main loop: with many agents running probabilistic actions
    # the CPU is what counts. Any level inflates the same way, so older snapshots read.
    return _b64(zlib.compress(shifted.astype(np.uint8).tobytes(), 1))


def _unpack_outcomes(text: Any) -> list[int]:
    try:
        raw = zlib.decompress(_unb64(text))
    except zlib.error as e:
        raise SnapshotError(f"outcome window does not inflate: {e}") from e
    values: list[int] = (np.frombuffer(raw, dtype=np.uint8).astype(np.int64) - 1).tolist()
    return values


def encode_action_state(state: Mapping[str, Any]) -> dict[str, Any]:
    """``ActionMonitor.export_state()`` → its compact JSON form."""
    w = state["window"]
    out: dict[str, Any] = {
        "action": state["action"],
        "fingerprint": state["fingerprint"],
        "k": w["k"], "size": w["size"], "kind": w["kind"], "seen": w["seen"],
        "values": _pack_outcomes(w["values"]),
        "block": w["block"],
        "completed": w["completed"],
        "confirm": [state["confirm_counts"], state["confirm_left"], state["confirm_start"]],
        "detector": None,
    }
    d = state["detector"]
    if d is not None:
        out["detector"] = {
            "p0": d["p0"], "log_threshold": d["log_threshold"],
            "alternatives": d["alternatives"], "n": d["n"], "alarmed": d["alarmed"],
            "r": _pack_floats(d["r"]), "cusum": _pack_floats(d["cusum"]),
            "start": _pack_ints(d["start"]),
        }
    return out


def decode_action_state(data: Mapping[str, Any]) -> dict[str, Any]:
    """The compact form → what ``ActionMonitor.load_state`` takes."""
    try:
        counts, left, start = data["confirm"]
        state: dict[str, Any] = {
            "action": str(data["action"]),
            "fingerprint": str(data["fingerprint"]),
            "window": {"k": int(data["k"]), "size": int(data["size"]), "kind": data["kind"],
                       "seen": int(data["seen"]), "values": _unpack_outcomes(data["values"]),
                       "block": [int(v) for v in data["block"]],
                       "completed": None if data["completed"] is None
                       else [int(v) for v in data["completed"]]},
            "confirm_counts": [int(v) for v in counts],
            "confirm_left": int(left),
            "confirm_start": int(start),
            "detector": None,
        }
        d = data["detector"]
        if d is not None:
            state["detector"] = {
                "p0": [float(v) for v in d["p0"]],
                "log_threshold": float(d["log_threshold"]),
                "alternatives": int(d["alternatives"]), "n": int(d["n"]),
                "alarmed": bool(d["alarmed"]), "r": _unpack_floats(d["r"]),
                "cusum": _unpack_floats(d["cusum"]), "start": _unpack_ints(d["start"]),
            }
    except (KeyError, TypeError, ValueError) as e:
        if isinstance(e, SnapshotError):
            raise
        raise SnapshotError(f"malformed action state: {type(e).__name__}: {e}") from e
    return state


ENCODED_KEPT = 1024
"""Tables' encoded states kept by their packed bytes (:func:`_encoded`)."""
_ENCODED: dict[tuple[int, int, bytes], tuple[Action, DriftConfig, dict[str, Any]]] = {}


def _encoded(mon: ActionMonitor) -> dict[str, Any]:
    """``encode_action_state`` of the table's exported state, kept by the table's packed
    bytes: a table is wholly described by its action, its settings and those bytes (the
    same bytes (``ActionMonitor.pack`` holds every field, exactly) for the same action
    and settings: a checkpoint snapshots every agent whose tables changed, and agents
    admitted since the last one mostly ran an action or two once, to the same tables
    (~10 us to export and encode, ~2 us to pack). The action and settings are held with
    the entry, so the ids in its key stay theirs. A copy of the top level is returned;
    what it holds is shared, read-only, as a snapshot's values are. Tables past
    :data:`_SMALL_WINDOW` executions are encoded directly: few agents' are alike, and
    their bytes are long to hash and to keep."""
    if mon.window.seen > _SMALL_WINDOW:
        return encode_action_state(mon.export_state(values_array=True))
    return _encoded_packed(mon.action, mon.config, mon.pack(), mon)


def _encoded_packed(action: Action, config: DriftConfig, raw: bytes,
                    mon: ActionMonitor | None) -> dict[str, Any]:
    """:func:`_encoded` of the table ``raw`` (its ``ActionMonitor.pack``) describes: the
    table itself (``mon``), or None to have it unpacked from ``raw`` only when its
    encoding is not kept already."""
    key = (id(action), id(config), raw)
    hit = _ENCODED.get(key)
    if hit is not None and hit[0] is action and hit[1] is config:
        return dict(hit[2])
    if mon is None:
        mon = ActionMonitor.unpack(action, config, raw)[0]
    encoded = encode_action_state(mon.export_state(values_array=True))
    if len(_ENCODED) >= ENCODED_KEPT:
        del _ENCODED[next(iter(_ENCODED))]  # the oldest
    _ENCODED[key] = (action, config, encoded)
    return dict(encoded)


def snapshot_agent(drift: DriftMonitor, agent_id: str,
                   model: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One agent's drift state in the versioned compact form (plain JSON values)."""
    return _snapshot(sorted(drift.tables(agent_id).items()), model)


def snapshot_frozen(frozen: tuple[bytes, list[tuple[Action, DriftConfig]]],
                    model: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """:func:`snapshot_agent` of the tables ``DriftMonitor.frozen`` took, as they were
    then: the scheduled checkpoint takes the bytes on the main loop (where the tables
    change) and makes the snapshot in its writer's thread, where the compression runs
    beside the main loop (zlib releases the interpreter lock) and the rest of the work
    in the gaps it leaves. The caches below are shared with :func:`snapshot_agent`: the
    daemon never runs both at once (whatever snapshots on the main loop first waits for
    the writer's snapshots and write: ``Checkpointer.await_writes``)."""
    # Each table's bytes in the blob are its ActionMonitor.pack, the key of the encodings
    # kept (_encoded): they are found from the tables' headers, and a table is unpacked
    # (~60,000 instructions, compiled) only to be encoded, when its encoding is not kept
    # or its window is past _SMALL_WINDOW. thaw_tables unpacked every table, and _encoded
    # packed each again for its key (~20,000 more).
    blob, specs = frozen
    data = decompress(memoryview(blob)[1:]) if blob[0] else memoryview(blob)[1:]
    tables: list[tuple[str, dict[str, Any]]] = []
    at = 0
    for action, config in specs:
        end, seen = ActionMonitor.packed_extent(action, config, data, at)
        if seen > _SMALL_WINDOW:
            mon = ActionMonitor.unpack(action, config, data, at)[0]
            encoded = encode_action_state(mon.export_state(values_array=True))
        else:
            encoded = _encoded_packed(action, config, bytes(data[at:end]), None)
        tables.append((action.name, encoded))
        at = end
    tables.sort(key=lambda t: t[0])
    return {
        "format": FORMAT,
        "version": VERSION,
        "model": dict(model) if model is not None else None,
        "actions": dict(tables),
    }


def _snapshot(tables: list[tuple[str, ActionMonitor]],
              model: Mapping[str, Any] | None) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "version": VERSION,
        "model": dict(model) if model is not None else None,
        "actions": {name: _encoded(mon) for name, mon in tables},
    }


def check_snapshot(data: Any) -> Mapping[str, Any]:
    """The snapshot if this capwatch can read it; :class:`SnapshotError` otherwise."""
    if not isinstance(data, Mapping):
        raise SnapshotError(f"a drift snapshot is a JSON object, found {type(data).__name__}")
    if data.get("format") != FORMAT:
        raise SnapshotError(f"not a drift snapshot (format {data.get('format')!r})")
    if data.get("version") != VERSION:
        raise SnapshotError(f"drift snapshot version {data.get('version')!r} is not supported "
                            f"(this capwatch reads version {VERSION})")
    if not isinstance(data.get("actions"), Mapping):
        raise SnapshotError("drift snapshot has no actions object")
    return data


def restore_agent(drift: DriftMonitor, agent_id: str, actions: Mapping[str, Action],
                  data: Any) -> dict[str, str]:
    """Load a snapshot into ``drift`` for the agent's current ``actions``.

    Raises :class:`SnapshotError` (changing nothing) for an unreadable snapshot. Otherwise
    every readable action that still matches the model is restored; returns action
    name → why it was not (those start afresh).
    """
    snap = check_snapshot(data)
    states: dict[str, dict[str, Any]] = {}
    skipped: dict[str, str] = {}
    for name, encoded in snap["actions"].items():
        try:
            states[str(name)] = decode_action_state(encoded)
        except SnapshotError as e:
            skipped[str(name)] = str(e)
    skipped.update(drift.load_agent_states(agent_id, actions, states))
    return skipped
