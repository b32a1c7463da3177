"""Plain-text tables for the command line (the same data the pages show)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from capwatch.console.data import OutcomeRow
from capwatch.console.terminal import line


def when(t: datetime | None) -> str:
    if t is None:
        return "-"
    return t.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def prob(p: float | None) -> str:
    return "-" if p is None else f"{p:.3f}"


def table(header: Sequence[str], rows: Sequence[Sequence[str]], *,
          right: Sequence[int] = ()) -> str:
    """Columns as wide as their widest cell; the last column is never padded. A character
    the wire refuses is written as its escape, a tab or a line break too (:func:`line`): a
    bidi override in a stored name reordered the rest of the terminal line."""
    cells = [list(header), *[[line(c) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = []
    for r in cells:
        parts = []
        for i, c in enumerate(r):
            if i == len(r) - 1:
                parts.append(c)
            elif i in right:
                parts.append(c.rjust(widths[i]))
            else:
                parts.append(c.ljust(widths[i]))
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def observed(r: OutcomeRow) -> str:
    if r.observed_p is None:
        return "-"
    if r.observed_low is None or r.observed_high is None:
        return prob(r.observed_p)
    return f"{r.observed_p:.3f} [{r.observed_low:.3f}, {r.observed_high:.3f}] n={r.observed_n}"


def outcome_table(rows: Sequence[OutcomeRow]) -> str:
    return table(["OUTCOME", "MODEL P", "OBSERVED P [95% CI]", "RE-ESTIMATED P"],
                 [[r.outcome, prob(r.model_p), observed(r), prob(r.new_p)] for r in rows],
                 right=(1,))
