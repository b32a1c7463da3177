"""The console's shared markup: the stylesheet, HTML escaping, the page frame and links.

Every value on a page goes through :func:`e`, which also writes a character the wire
refuses (a bidi override, a zero-width space, stored before the rule) as its escape, or
:func:`attr` for a form's value that must come back as it was; :class:`Links` knows where
pages live (the saved report has no server, so its links are anchors or none).
"""

from __future__ import annotations

from datetime import UTC, datetime
from html import escape
from urllib.parse import quote, urlencode

from capwatch.contracts.wire_text import visible

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
    """``value`` as HTML text, each character the wire refuses written as its escape
    (``\\u202e``): a name stored before the rule (session 20) held a right-to-left
    override that reordered the rest of its table row, or a zero-width space that made
    two agents' names look alike (oper20)."""
    return escape(visible(str(value)), quote=True)


def attr(value: object) -> str:
    """``value`` as an HTML attribute, unchanged: a form's hidden field or search text,
    which the browser sends back and which must name what it named (a family stored with
    a zero-width space is acted on by that name). Not shown as text."""
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
