"""Server-rendered HTML for the console and the report: small functions, no template engine.

Every value goes through :func:`e` (HTML escaping); charts are inline SVG with a title and
a description, and every chart has the same numbers in a table next to it. No script, no
external stylesheet or font: a page works offline and in a saved file.

It holds every page's markup (fleet, agent, family, alerts, the report). The shared
escaping, frame and links are in :mod:`capwatch.console.markup`, the SVG charts in
:mod:`capwatch.console.charts`; the data each page shows is computed in
:mod:`capwatch.console.data`, the routing in :mod:`capwatch.console.web`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

from capwatch.console.charts import drift_chart, probability_chart, probability_table
from capwatch.console.data import (
    STATES,
    AgentView,
    FamilyView,
    Page,
    VersionView,
)
from capwatch.console.markup import CSS as CSS
from capwatch.console.markup import Links as Links
from capwatch.console.markup import attr as attr
from capwatch.console.markup import badge as badge
from capwatch.console.markup import document as document
from capwatch.console.markup import e as e
from capwatch.console.markup import link as link
from capwatch.console.markup import prob as prob
from capwatch.console.markup import when as when
from capwatch.contracts.store import OutboxAlert
from capwatch.contracts.versions import unchecked_summary
from capwatch.models_store.actions import OperatorAction

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
        f'<input type="text" id="q" name="q" value="{attr(text)}">'
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
            f"<td>{e(_short(r.change))}{_more(r.more_changes)}</td><td>{e(when(r.last_event))} "
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


def _more(n: int) -> str:
    return f' <span class="muted">(+{n} more)</span>' if n > 0 else ""


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
        facts += (f"; state {badge(r.state)}"
                  + (" (its own model's probabilities hold the baseline's within its "
                     "intervals)" if r.as_baseline else "")
                  + f"; runs <strong>{e(r.version)}</strong>; "
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
        detail = e(_json(body.get("evidence") or {}))
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
