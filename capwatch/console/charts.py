"""Inline SVG charts of an action's outcome probabilities and of a drift alarm.

Each chart has a title and a description for screen readers, and every chart's numbers
are also shown in a table next to it (:func:`probability_table`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from capwatch.console.data import DriftPoint, OutcomeRow
from capwatch.console.markup import e, prob


def probability_chart(action: str, rows: Sequence[OutcomeRow]) -> str:
    """Per outcome: the model's p (grey), the observed p with its interval (black), the
    re-estimated p (blue)."""
    width, left, right, row_h, top = 640, 230, 20, 34, 24
    height = top + row_h * len(rows) + 50
    scale = width - left - right

    def x(p: float) -> float:
        return left + scale * max(0.0, min(1.0, p))

    parts = [f'<svg role="img" aria-labelledby="pc-{e(action)}-t pc-{e(action)}-d" '
             f'width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
             f'xmlns="http://www.w3.org/2000/svg">',
             f'<title id="pc-{e(action)}-t">Outcome probabilities of {e(action)}</title>',
             f'<desc id="pc-{e(action)}-d">For each outcome: grey bar the model before, black '
             f"point and line the observed probability with its 95% interval, blue bar the "
             f"re-estimated probability. The same numbers are in the table.</desc>"]
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        parts.append(f'<line x1="{x(tick):.1f}" y1="{top - 6}" x2="{x(tick):.1f}" '
                     f'y2="{height - 46}" stroke="#ccc"/>'
                     f'<text x="{x(tick):.1f}" y="{height - 30}" text-anchor="middle">'
                     f"{tick:g}</text>")
    legend_y = height - 10
    parts.append(f'<rect x="{left}" y="{legend_y - 9}" width="14" height="9" fill="#8c8c8c"/>'
                 f'<text x="{left + 18}" y="{legend_y}">model before</text>'
                 f'<line x1="{left + 120}" y1="{legend_y - 4}" x2="{left + 140}" '
                 f'y2="{legend_y - 4}" stroke="#000" stroke-width="2"/>'
                 f'<circle cx="{left + 130}" cy="{legend_y - 4}" r="4" fill="#000"/>'
                 f'<text x="{left + 146}" y="{legend_y}">observed, 95% interval</text>'
                 f'<rect x="{left + 300}" y="{legend_y - 9}" width="14" height="9" '
                 f'fill="#1f5fbf"/><text x="{left + 318}" y="{legend_y}">re-estimated</text>')
    for i, r in enumerate(rows):
        y = top + i * row_h
        label = r.outcome if len(r.outcome) <= 34 else r.outcome[:33] + "…"
        parts.append(f'<text x="{left - 8}" y="{y + 16}" text-anchor="end">{e(label)}</text>')
        if r.model_p is not None:
            parts.append(f'<rect x="{left}" y="{y + 2}" width="{x(r.model_p) - left:.1f}" '
                         f'height="9" fill="#8c8c8c"/>')
        if r.new_p is not None:
            parts.append(f'<rect x="{left}" y="{y + 13}" width="{x(r.new_p) - left:.1f}" '
                         f'height="9" fill="#1f5fbf"/>')
        if r.observed_p is not None:
            lo = r.observed_low if r.observed_low is not None else r.observed_p
            hi = r.observed_high if r.observed_high is not None else r.observed_p
            parts.append(f'<line x1="{x(lo):.1f}" y1="{y + 27}" x2="{x(hi):.1f}" '
                         f'y2="{y + 27}" stroke="#000" stroke-width="2"/>'
                         f'<circle cx="{x(r.observed_p):.1f}" cy="{y + 27}" r="4" '
                         f'fill="#000"/>')
    parts.append("</svg>")
    return "".join(parts)


def probability_table(rows: Sequence[OutcomeRow]) -> str:
    body = "".join(
        f"<tr><td><code>{e(r.outcome)}</code></td><td class=\"num\">{prob(r.model_p)}</td>"
        f"<td class=\"num\">{_observed(r)}</td><td class=\"num\">{prob(r.new_p)}</td></tr>"
        for r in rows)
    return ('<table><thead><tr><th scope="col">Outcome</th><th scope="col">Model p</th>'
            '<th scope="col">Observed p [95% interval] (samples)</th>'
            f'<th scope="col">Re-estimated p</th></tr></thead><tbody>{body}</tbody></table>')


def _observed(r: OutcomeRow) -> str:
    if r.observed_p is None:
        return "–"
    if r.observed_low is None or r.observed_high is None:
        return prob(r.observed_p)
    return (f"{r.observed_p:.3f} [{r.observed_low:.3f}, {r.observed_high:.3f}] "
            f"(n={r.observed_n})")


def drift_chart(point: DriftPoint) -> str:
    """The window the statistic was computed on, the change point, the statistic at the
    alarm and its threshold (what the store keeps of the test)."""
    width, height, left, bottom, top = 640, 170, 50, 36, 16
    lo, hi = point.window
    span = max(1, hi - lo)
    threshold = point.threshold if not math.isnan(point.threshold) else None
    ymax = max(point.statistic, threshold or 0.0) * 1.15 or 1.0

    def x(n: float) -> float:
        return left + (width - left - 20) * (n - lo) / span

    def y(v: float) -> float:
        return top + (height - top - bottom) * (1 - v / ymax)

    ident = f"dc-{e(point.action)}"
    parts = [f'<svg role="img" aria-labelledby="{ident}-t {ident}-d" width="{width}" '
             f'height="{height}" viewBox="0 0 {width} {height}" '
             f'xmlns="http://www.w3.org/2000/svg">',
             f'<title id="{ident}-t">Drift statistic of {e(point.action)}</title>',
             f'<desc id="{ident}-d">{e(point.detector)} test on executions {lo} to {hi}: '
             f"statistic {point.statistic:.2f}"
             + (f" against threshold {threshold:.2f}" if threshold is not None else "")
             + (f", change point at {point.change_point}" if point.change_point is not None
                else "") + ". The alarm is the red point.</desc>",
             f'<line x1="{left}" y1="{height - bottom}" x2="{width - 20}" '
             f'y2="{height - bottom}" stroke="#555"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" stroke="#555"/>',
             f'<text x="{left}" y="{height - 18}" text-anchor="middle">{lo}</text>',
             f'<text x="{width - 20}" y="{height - 18}" text-anchor="middle">{hi}</text>',
             f'<text x="{(left + width) / 2}" y="{height - 4}" text-anchor="middle">'
             f"executions of {e(point.action)} (window)</text>"]
    if threshold is not None:
        parts.append(f'<line x1="{left}" y1="{y(threshold):.1f}" x2="{width - 20}" '
                     f'y2="{y(threshold):.1f}" stroke="#8a5a00" stroke-dasharray="6 4"/>'
                     f'<text x="{left + 4}" y="{y(threshold) - 4:.1f}">threshold '
                     f"{threshold:.2f}</text>")
    if point.change_point is not None and lo <= point.change_point <= hi:
        parts.append(f'<line x1="{x(point.change_point):.1f}" y1="{top}" '
                     f'x2="{x(point.change_point):.1f}" y2="{height - bottom}" '
                     f'stroke="#1f5fbf" stroke-dasharray="3 3"/>'
                     f'<text x="{x(point.change_point) + 4:.1f}" '
                     f'y="{height - bottom - 6}">change point</text>')
    # Only the value at the alarm is stored, not the path to it: no line is drawn there.
    parts.append(f'<circle cx="{x(hi):.1f}" cy="{y(point.statistic):.1f}" r="6" '
                 f'fill="#b3140a"/><text x="{x(hi) - 8:.1f}" y="{y(point.statistic) - 9:.1f}" '
                 f'text-anchor="end">alarm: {point.statistic:.2f}</text></svg>')
    return "".join(parts)
