"""``capwatch report``: one self-contained HTML file about a family or an agent.

The same sections as the console's pages, for sharing after an incident: no script, no
external resource, no link back to a server (a saved file outlives the daemon).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from capwatch.console import data, html
from capwatch.contracts.store import ModelStore, StoreError


def render_report(store: ModelStore, family: str, agent_id: str | None = None,
                  now: datetime | None = None) -> str:
    links = html.Links(None)
    rows = data.fleet(store, family)
    if store.latest(family, None) is None:
        raise StoreError(f"no family {family} in the store")
    stamp = html.when(now or datetime.now(UTC))
    if agent_id is None:
        body = html.family_page(data.family_view(store, family, rows), links)
        drifted = [r for r in rows if r.state != "healthy"]
        body += "".join(
            "<hr>" + html.agent_page(data.agent_view(store, family, r.agent_id, r), links)
            for r in drifted)
        title = f"capwatch report: family {family}"
    else:
        row = next((r for r in rows if r.agent_id == agent_id), None)
        if row is None:
            raise StoreError(f"no agent {agent_id} of {family} in the store")
        body = html.agent_page(data.agent_view(store, family, agent_id, row), links)
        title = f"capwatch report: {family}/{agent_id}"
    nav = (f'<span class="brand">capwatch report</span><span>{html.e(title)}</span>'
           f"<span>written {html.e(stamp)}</span>")
    return html.document(title, body, nav=nav)


def write_report(store: ModelStore, family: str, agent_id: str | None, path: Path) -> Path:
    text = render_report(store, family, agent_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path
