"""How much the property tests (Hypothesis) explore, chosen by ``CAPWATCH_HYPOTHESIS``.

``ci`` (the default, ``make test``): derandomized, without the example database. Every run
of a test tries the same examples (Hypothesis seeds itself from the test's source), so a
red run is the code's doing, not the draw's, and is red again when run again. A property
test once found a real bug in CI by chance (session 11): such luck belongs in a run meant
for it, not in the gate of every change.

``fuzz`` (``make fuzz``): random examples, a new draw each run, ``CAPWATCH_FUZZ_SCALE``
times as many of them (10 by default). A failure prints the example and the
``@reproduce_failure`` blob; the example becomes a plain test case once understood.
"""

from __future__ import annotations

import os

from hypothesis import settings

PROFILE = os.environ.get("CAPWATCH_HYPOTHESIS", "ci")
SCALE = int(os.environ.get("CAPWATCH_FUZZ_SCALE", "10")) if PROFILE == "fuzz" else 1


def examples(n: int) -> int:
    """A test's ``max_examples``: ``n`` in CI, ``n`` times the scale when fuzzing."""
    return n * SCALE


def register() -> None:
    settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
    settings.register_profile("fuzz", derandomize=False, print_blob=True)
    if PROFILE not in ("ci", "fuzz"):
        raise ValueError(f"CAPWATCH_HYPOTHESIS={PROFILE!r}: ci or fuzz")
    settings.load_profile(PROFILE)
