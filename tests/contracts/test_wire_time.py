"""The decoder's reading of a record's time (wire_fast._time) against the schema's
validator: the same value for every text, and every text the validator refuses refused.
Kept as the contract any faster reading of the time must meet (docs/performance.md, "The
record's time": one was tried and not kept)."""

from __future__ import annotations

import json
from datetime import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from capwatch.contracts import wire, wire_fast
from tests.support.fuzzing import examples


def _validator(text: bytes) -> datetime | str | None:
    try:
        return wire_fast._TIME_JSON(text)
    except ValidationError:
        return "refused"


def _decoder(text: bytes) -> datetime | str | None:
    try:
        return wire_fast._time(text)
    except wire_fast._Refused:
        return "refused"


def _same(text: bytes) -> None:
    old, new = _validator(text), _decoder(text)
    if isinstance(old, datetime):
        assert isinstance(new, datetime), text
        # Equal as instants is not enough: the fields and the offset's object alike.
        assert (new.replace(tzinfo=None), type(new.tzinfo), new.utcoffset()) \
            == (old.replace(tzinfo=None), type(old.tzinfo), old.utcoffset()), text
    else:
        assert new == old, text


_DIGITS = st.text("0123456789", min_size=1, max_size=8)
_PIECES = st.sampled_from(["-", ":", "T", "t", " ", ".", "Z", "z", "+", "-", "0", "9", "\"",
                           "\\u0054", ""])


@st.composite
def _times(draw: st.DrawFn) -> bytes:
    year = draw(st.sampled_from(["0000", "0001", "1970", "2024", "2026", "9999", "999"]))
    month = draw(st.sampled_from(["01", "02", "12", "13", "00", "1"]))
    day = draw(st.sampled_from(["01", "28", "29", "30", "31", "32", "00"]))
    hour = draw(st.sampled_from(["00", "23", "24", "7"]))
    minute = draw(st.sampled_from(["00", "59", "60"]))
    second = draw(st.sampled_from(["00", "59", "60", "61", "5", ""]))
    fraction = draw(st.one_of(st.just(""), _DIGITS.map(lambda d: "." + d), st.just(".")))
    zone = draw(st.sampled_from(["Z", "z", "+00:00", "-00:00", "+05:30", "-23:59", "+24:00",
                                 "+0530", "+05", "+00:60", "", "+05:30:00", "UTC"]))
    sep = draw(st.sampled_from(["T", "T", "T", "t", " ", "_"]))
    text = f"{year}-{month}-{day}{sep}{hour}:{minute}"
    if second:
        text += ":" + second
    text += fraction + zone
    if draw(st.booleans()):
        # One piece put in or taken out somewhere: shapes near the common one.
        at = draw(st.integers(0, len(text)))
        cut = draw(st.integers(0, 1))
        text = text[:at] + draw(_PIECES) + text[at + cut:]
    return json.dumps(text).encode()


@settings(max_examples=examples(3000), deadline=None)
@given(_times())
def test_times_read_as_the_validator_reads_them(text: bytes) -> None:
    _same(text)


@settings(max_examples=examples(500), deadline=None)
@given(st.one_of(st.text(max_size=40).map(lambda t: json.dumps(t).encode()),
                 st.binary(max_size=40)))
def test_any_text_read_as_the_validator_reads_it(text: bytes) -> None:
    _same(text)


@pytest.mark.parametrize("text", [
    "2026-02-29T00:00:00Z", "2026-05-01T00:00:60Z", "2026-05-01T24:00:00Z",
    "0000-01-01T00:00:00Z", "2026-05-01T00:00:00.Z", "2026-05-01T00:00:00+24:00",
])
def test_a_refused_time_is_refused_by_the_decoder(text: str) -> None:
    raw = json.dumps(text).encode()
    with pytest.raises(wire_fast._Refused):
        wire_fast._time(raw)


def test_a_refused_record_time_is_a_dead_letter_with_the_schemas_reason() -> None:
    event = {"type": "transition", "agent_id": "a1", "family": "f", "time":
             "2026-02-29T00:00:00Z", "state": [["p", "x"]], "action": ["go", "x"],
             "next_state": [["p", "x"]]}
    got = wire_fast.decode(json.dumps(event).encode())
    assert isinstance(got, wire.DeadLetter)
    assert got == wire.decode(json.dumps(event).encode())
