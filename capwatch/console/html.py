"""Server-rendered HTML for the console and the report: small functions, no template engine.

Every value goes through :func:`e` (HTML escaping); charts are inline SVG with a title and
a description, and every chart has the same numbers in a table next to it. No script, no
external stylesheet or font: a page works offline and in a saved file.

About 500 lines because it holds every page's markup (fleet, agent, family, alerts, the
report) over one shared set of escaping, table and SVG helpers; the data each page shows
is computed in :mod:`capwatch.console.data`, the routing in :mod:`capwatch.console.web`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from html import escape
from urllib.parse import quote, urlencode

from capwatch.console.data import (
    STATES,
    AgentView,
    DriftPoint,
    FamilyView,
    OutcomeRow,
    Page,
    VersionView,
)
from capwatch.contracts.store import OutboxAlert
from capwatch.contracts.versions import unchecked_summary
from capwatch.models_store.actions import OperatorAction

CSS = """
:root { color-scheme: light; }
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0;
       color: #1a1a1a; background: #fff; }
header.top { background: #14324f; color: #fff; padding: .6rem 1.2rem; display: flex;
             gap: 1.5rem; align-items: center; flex-wrap: wrap; }
header.top a { color: #fff; }
header.top .brand { font-weight: 700; font-size: 1.1rem; text-decoration: none; }
main { padding: 1rem 1.2rem 3rem; max-width: 1200px; }
a { color: #0645ad; }
a:focus, button:focus, input:focus, select:focus, summary:focus, textarea:focus {
  outline: 3px solid #c75000; outline-offset: 2px; }
h1 { font-size: 1.45rem; margin: .4rem 0 .8rem; }
h2 { font-size: 1.15rem; margin: 1.6rem 0 .5rem; border-bottom: 1px solid #ccc; }
h3 { font-size: 1rem; margin: 1.1rem 0 .3rem; }
table { border-collapse: collapse; margin: .3rem 0 .8rem; }
th, td { border: 1px solid #bbb; padding: .25rem .5rem; text-align: left;
         vertical-align: top; }
th { background: #eef1f4; }
td.nowrap { white-space: nowrap; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
code, pre { font: 13px/1.4 ui-monospace, "DejaVu Sans Mono", monospace; }
pre.pddl { border: 1px solid #bbb; padding: .4rem 0; overflow-x: auto; }
pre.pddl span { display: block; padding: 0 .6rem; }
pre.pddl span.changed { background: #fff1c2; border-left: 4px solid #8a5a00; }
.badge { display: inline-block; padding: 0 .45rem; border-radius: .6rem; font-size: .85rem;
         border: 1px solid #555; }
.state-healthy { background: #e3f4e6; color: #0b4d1a; }
.state-inconsistent { background: #fff0c7; color: #5c3d00; }
.state-assessing { background: #e2ecfb; color: #0d3573; }
.state-drifted { background: #fde2e0; color: #7a1209; }
.state-failed { background: #3b0d0d; color: #fff; }
.muted { color: #4d4d4d; }
.flash { background: #e2ecfb; border: 1px solid #0d3573; padding: .5rem .8rem; }
.error { background: #fde2e0; border: 1px solid #7a1209; padding: .5rem .8rem; }
form.inline { display: inline; }
form.action { border: 1px solid #bbb; padding: .5rem .8rem; margin: .4rem 0;
              max-width: 44rem; }
label { display: inline-block; margin: .2rem .6rem .2rem 0; }
input[type=text], input[type=password], select { font: inherit; padding: .15rem .3rem; }
button { font: inherit; padding: .2rem .8rem; background: #14324f; color: #fff;
         border: 1px solid #14324f; border-radius: .2rem; cursor: pointer; }
button.secondary { background: #fff; color: #14324f; }
nav.pager a, nav.pager span { margin-right: .6rem; }
ol.timeline { list-style: none; padding-left: 0; border-left: 3px solid #14324f; }
ol.timeline li { margin: 0 0 .5rem .8rem; }
ol.timeline .kind { font-weight: 600; text-transform: uppercase; font-size: .75rem;
                    letter-spacing: .03em; }
.counts a { margin-right: .8rem; }
svg text { font: 12px system-ui, sans-serif; fill: #1a1a1a; }
"""


def e(value: object) -> str:
    return escape(str(value), quote=True)


def when(t: datetime | None) -> str:
    if t is None:
        return "–"
    return t.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def prob(p: float | None) -> str:
    return "–" if p is None else f"{p:.3f}"


def document(title: str, body: str, *, nav: str = "") -> str:
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            # An empty icon: no /favicon.ico request (a 404 the browser would log).
            f'<link rel="icon" href="data:,">'
            f"<title>{e(title)}</title><style>{CSS}</style></head><body>"
            f'<header class="top">{nav}</header><main id="main">{body}</main></body></html>')


def badge(state: str) -> str:
    return f'<span class="badge state-{e(state)}">{e(state)}</span>'


# ------------------------------------------------------------------ links


class Links:
    """Where things are; the report has no server, so its links are anchors or none."""

    def __init__(self, base: str | None = "/console") -> None:
        self.base = base

    def fleet(self, **query: object) -> str | None:
        if self.base is None:
            return None
        q = urlencode({k: v for k, v in query.items() if v not in (None, "")})
        return f"{self.base}/" + (f"?{q}" if q else "")

    def agent(self, family: str, agent: str) -> str | None:
        if self.base is None:
            return None
        return f"{self.base}/agents/{quote(family, safe='')}/{quote(agent, safe='')}"

    def family(self, family: str) -> str | None:
        if self.base is None:
            return None
        return f"{self.base}/families/{quote(family, safe='')}"

    def alerts(self, **query: object) -> str | None:
        if self.base is None:
            return None
        q = urlencode({k: v for k, v in query.items() if v not in (None, "")})
        return f"{self.base}/alerts" + (f"?{q}" if q else "")


def link(href: str | None, text: str) -> str:
    return f'<a href="{e(href)}">{e(text)}</a>' if href else e(text)


# ------------------------------------------------------------------ fleet


def fleet_page(page: Page, links: Links, *, state: str, text: str, sort: str,
               descending: bool, per_page: int, families: Sequence[str]) -> str:
    counts = " ".join(
        f'<a href="{e(links.fleet(state=s, q=text))}">{badge(s)} {page.counts.get(s, 0)}</a>'
        for s in STATES)
    options = "".join(f'<option value="{e(s)}"{" selected" if s == state else ""}>'
                      f'{e(s or "any")}</option>' for s in ("", *STATES))
    sorts = "".join(f'<option value="{e(s)}"{" selected" if s == sort else ""}>'
                    f'{e(s.replace("_", " "))}</option>'
                    for s in ("agent", "family", "state", "version", "last_event",
                              "open_alerts"))
    form = (
        '<form method="get" role="search" aria-label="Filter agents">'
        f'<label for="q">Family or agent contains</label>'
        f'<input type="text" id="q" name="q" value="{e(text)}">'
        f'<label for="state">State</label><select id="state" name="state">{options}</select>'
        f'<label for="sort">Sort by</label><select id="sort" name="sort">{sorts}</select>'
        f'<label><input type="checkbox" name="desc" value="1"'
        f'{" checked" if descending else ""}> descending</label>'
        f'<input type="hidden" name="per_page" value="{per_page}">'
        '<button type="submit">Show</button></form>')
    head = "".join(f"<th scope=\"col\">{h}</th>" for h in (
        "Agent", "Family", "State", "Model", "Δ baseline", "What changed", "Last event",
        "Open alerts"))
    body = []
    for r in page.rows:
        model = f"own v{r.version.version}" if r.version.agent_id else \
            f"baseline v{r.version.version}"
        body.append(
            f"<tr><td class=\"nowrap\">{link(links.agent(r.family, r.agent_id), r.agent_id)}"
            f"</td><td class=\"nowrap\">{link(links.family(r.family), r.family)}</td>"
            f"<td>{badge(r.state)}</td><td class=\"nowrap\">{e(model)}</td>"
            f"<td class=\"num\">{r.delta_to_baseline}</td>"
            f"<td>{e(_short(r.change))}</td><td>{e(when(r.last_event))} "
            f"<span class=\"muted\">{e(r.last_event_what)}"
            f"</span></td><td class=\"num\">{r.open_alerts}</td></tr>")
    pager = _pager(page, links, state=state, text=text, sort=sort, descending=descending,
                   per_page=per_page)
    fams = " · ".join(link(links.family(f), f) for f in families)
    return (f"<h1>Fleet</h1><p>Families: {fams or 'none yet'}</p>"
            f'<p class="counts" aria-label="Agents per state">{counts}</p>{form}'
            f"<p>{page.total} agents match; page {page.page} of {page.pages}.</p>"
            f'<table aria-label="Agents"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table>{pager}")


def _short(text: str, n: int = 90) -> str:
    return text if len(text) <= n else text[:n - 1] + "…"


def _pager(page: Page, links: Links, **query: object) -> str:
    parts = []
    q = {k: v for k, v in query.items() if k != "descending"}
    if query.get("descending"):
        q["desc"] = 1
    if page.page > 1:
        parts.append(link(links.fleet(**q, page=page.page - 1), "← previous"))
    parts.append(f"<span>page {page.page} / {page.pages}</span>")
    if page.page < page.pages:
        parts.append(link(links.fleet(**q, page=page.page + 1), "next →"))
    return f'<nav class="pager" aria-label="Pages">{"".join(parts)}</nav>'


# ------------------------------------------------------------------ charts


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


# ------------------------------------------------------------------ agent


def pal_table(view: VersionView) -> str:
    if not view.changes:
        return ""
    ev = view.version.evidence
    n_trans = len(ev.get("transitions") or [])
    evidence = (f"{n_trans} inconsistent transitions" if n_trans else
                "operator action" if "operator_action" in ev else
                "drift test" if ev.get("drift") else "assessment queries")
    rows = "".join(
        f"<tr><td><code>{e(pal.action)}</code></td><td><code>{e(pal.atom)}</code></td>"
        f"<td>{e(pal.location.value)}</td><td>{e(_mode(old))} → {e(_mode(new))}</td>"
        f"<td>{e(evidence)}</td><td class=\"num\">{view.queries}</td></tr>"
        for pal, old, new in view.changes)
    return ('<table aria-label="Changed pal-tuples"><thead><tr><th scope="col">Action</th>'
            '<th scope="col">Atom</th><th scope="col">Where</th>'
            '<th scope="col">Old → new</th><th scope="col">Evidence</th>'
            f'<th scope="col">Queries asked</th></tr></thead><tbody>{rows}</tbody></table>')


def _mode(mode: object) -> str:
    value = getattr(mode, "value", str(mode))
    return {"+": "+ (positive)", "-": "− (negative)", "0": "absent"}.get(str(value),
                                                                          str(value))


def version_section(view: VersionView, *, forms: str = "") -> str:
    v = view.version
    review = ""
    if view.review is not None:
        r = view.review
        review = (f'<p><strong>{e(r.kind.capitalize())}d</strong> by {e(r.actor)} on '
                  f"{e(when(r.created_at))}: {e(r.reason)}</p>")
    origin = ""
    if view.action is not None:
        origin = f"<p>Written by an operator: {e(view.action.describe())}</p>"
    elif v.agent_id is not None:
        effort = f"{view.queries} {'query' if view.queries == 1 else 'queries'} asked"
        if view.samples:
            effort += f", {view.samples} samples of the agent's outcomes"
        origin = f"<p>Learned by assessment: {e(effort)}.</p>"
        unchecked = unchecked_summary(v.coverage)
        if unchecked is not None:
            origin += f'<p class="warn"><strong>{e(unchecked)}</strong></p>'
        coverage = v.coverage
        if coverage is not None:
            origin += (f'<p class="muted">{int(coverage.get("confirmed", 0))} pal-tuples '
                       f'confirmed by evidence, {int(coverage.get("carried_over", 0))} '
                       f'carried over unverified, {int(coverage.get("unresolved", 0))} '
                       f"unresolved.</p>")
    words = "".join(f"<li>{e(s)}</li>" for s in view.summary)
    words = f"<ul>{words}</ul>" if words else (
        "<p class=\"muted\">The family baseline.</p>" if v.agent_id is None and v.parent is None
        else "<p class=\"muted\">No change in the model's words.</p>")
    probs = "".join(
        f"<h4>Outcome probabilities of <code>{e(name)}</code></h4>"
        f"{probability_chart(name, rows)}{probability_table(rows)}"
        for name, rows in view.probabilities.items())
    drift = "".join(
        f"<h4>Drift statistic of <code>{e(p.action)}</code></h4>{drift_chart(p)}"
        f"<p class=\"muted\">{e(p.summary)}</p>" for p in view.drift)
    anchor = f"v-{e(v.ref.agent_id or 'baseline')}-{v.ref.version}"
    return (f'<section id="{anchor}" aria-label="{e(v.ref)}"><h3>{e(v.ref)} '
            f'<span class="muted">{e(when(v.created_at))}; Δ {v.delta_to_parent} from '
            f"{e(v.parent or 'nothing')}, Δ {v.delta_to_baseline} from the baseline</span>"
            f"</h3>{origin}{review}{words}{pal_table(view)}{probs}{drift}{forms}</section>")


def timeline(items: Iterable[tuple[datetime, str, str]]) -> str:
    lis = "".join(f'<li><span class="kind">{e(kind)}</span> '
                  f'<time datetime="{e(t.isoformat())}">{e(when(t))}</time><br>{e(text)}</li>'
                  for t, kind, text in items)
    return f'<ol class="timeline">{lis}</ol>' if lis else "<p>Nothing yet.</p>"


def agent_page(view: AgentView, links: Links, *,
               version_forms: Mapping[str, str] | None = None, agent_forms: str = "") -> str:
    r = view.row
    head = f"<h1>Agent {e(view.agent_id)}</h1>"
    facts = f"<p>Family {link(links.family(view.family), view.family)}"
    if r is not None:
        facts += (f"; state {badge(r.state)}; runs <strong>{e(r.version)}</strong>; "
                  f"Δ {r.delta_to_baseline} from the baseline; {r.open_alerts} open alerts; "
                  f"{r.transitions} transitions seen ({r.inconsistent} inconsistent); last "
                  f"event {e(when(r.last_event))} ({e(r.last_event_what)})")
    facts += "</p>"
    forms = version_forms or {}
    versions = "".join(version_section(v, forms=forms.get(str(v.version.ref), ""))
                       for v in reversed(view.versions))
    alerts = alert_table(view.alerts, links, with_agent=False)
    return (f"{head}{facts}{agent_forms}<h2>Lineage</h2>{timeline(view.timeline)}"
            f"<h2>Versions, newest first</h2>{versions}<h2>Alerts</h2>{alerts}")


# ------------------------------------------------------------------ family


def pddl_block(pddl: str, changed: set[int]) -> str:
    lines = "".join(
        f'<span class="changed" aria-label="changed">{e(line) or " "}</span>'
        if i in changed else f"<span>{e(line) or ' '}</span>"
        for i, line in enumerate(pddl.splitlines(), start=1))
    return f'<pre class="pddl" tabindex="0" aria-label="Domain PDDL">{lines}</pre>'


def family_page(view: FamilyView, links: Links, *, forms: str = "") -> str:
    base = view.baseline
    drifted = [r for r in view.rows if r.state != "healthy"]
    shared = "".join(
        f"<li><strong>{len(c.agents)} agent{'s' if len(c.agents) != 1 else ''} of "
        f"{e(view.family)}</strong>: {e(c.text)}<br><span class=\"muted\">"
        + ", ".join(link(links.agent(view.family, a), a) for a in c.agents)
        + "</span></li>" for c in view.shared)
    rows = "".join(
        f"<tr><td>{link(links.agent(r.family, r.agent_id), r.agent_id)}</td>"
        f"<td>{badge(r.state)}</td><td>{e(r.version)}</td><td class=\"num\">"
        f"{r.open_alerts}</td></tr>" for r in drifted)
    table_ = ('<table aria-label="Agents that are not healthy"><thead><tr>'
              '<th scope="col">Agent</th><th scope="col">State</th><th scope="col">Model</th>'
              f'<th scope="col">Open alerts</th></tr></thead><tbody>{rows}</tbody></table>'
              if rows else "<p>Every agent is healthy.</p>")
    history = "".join(
        f"<li>{e(v.ref)} ({e(when(v.created_at))}): "
        + e("; ".join(v.summary) or v.evidence.get("source", "")
            or ("promoted" if "promoted_from" in v.evidence else ""))
        + "</li>" for v in view.baselines)
    actions = "".join(f"<li>{e(when(a.created_at))}: {e(a.describe())}"
                      f"{' (agent ' + e(a.agent_id) + ')' if a.agent_id else ''}</li>"
                      for a in view.actions[:50])
    pddl = pddl_block(base.pddl, view.changed_lines) if base is not None else ""
    return (f"<h1>Family {e(view.family)}</h1>"
            f"<p>{len(view.rows)} agents; {len(drifted)} not healthy. Baseline "
            f"<strong>{e(base.ref) if base else 'none'}</strong>.</p>{forms}"
            f"<h2>Changes agents share</h2>"
            + (f"<ul>{shared}</ul>" if shared else "<p>No agent's model differs from the "
               "baseline.</p>")
            + f"<h2>Agents that are not healthy</h2>{table_}"
            f"<h2>Baseline versions</h2><ul>{history}</ul>"
            f"<h2>Operator actions</h2>" + (f"<ul>{actions}</ul>" if actions else
                                           "<p>None.</p>")
            + "<h2>The baseline domain</h2><p>Actions some agent's model changes are "
            "highlighted.</p>" + pddl)


# ------------------------------------------------------------------ alerts


def alert_table(alerts: Sequence[OutboxAlert], links: Links, *, with_agent: bool = True
                ) -> str:
    if not alerts:
        return "<p>No alerts.</p>"
    rows = []
    for a in alerts:
        body = a.alert
        agent = str(body.get("agent_id") or "")
        who = link(links.agent(a.family, agent), f"{a.family}/{agent}") if agent else \
            e(f"{a.family}/*")
        detail = escape(_json(body.get("evidence") or {}))
        rows.append(
            f"<tr><td>{e(when(a.created_at))}</td><td>{e(body.get('severity', ''))}</td>"
            f"<td>{e(a.alert_type)}</td>" + (f"<td>{who}</td>" if with_agent else "")
            + f"<td>{e(a.status)}</td><td>{e(body.get('summary', ''))}"
            f"<details><summary>detail</summary><pre>{detail}</pre></details></td></tr>")
    head = "".join(f'<th scope="col">{h}</th>' for h in (
        ["Time", "Severity", "Type"] + (["Agent"] if with_agent else [])
        + ["Status", "Summary"]))
    return (f'<table aria-label="Alerts"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table>")


def _json(obj: object) -> str:
    import json

    return json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def actions_list(actions: Sequence[OperatorAction]) -> str:
    return "".join(f"<li>{e(when(a.created_at))}: {e(a.describe())}</li>" for a in actions)
