"""The console's web pages, served by the daemon on its API port under ``/console/``.

Read-only unless the daemon has an operator token (``http.token``). An operator signs
in with a name and the token; the session is a cookie signed with a key derived from the
token (HttpOnly, SameSite=Strict), so every replica sharing the token accepts it and no
session state is kept. Every form carries a CSRF token derived from that cookie, and a
POST whose Origin is another site is refused. Scripts shares the token over
``POST /api/v1/actions`` with ``Authorization: Bearer TOKEN`` instead.

Pages (GET)::

    /console/                          the fleet: filter, sort, pages
    /console/agents/{family}/{agent}   lineage, versions, probabilities, drift, actions
    /console/families/{family}         shared changes, baseline, PDDL with changes marked
    /console/alerts                    alert history from the store (every replica)

Actions (POST, signed in): ``/console/actions`` with ``kind`` = assess | approve | reject |
rollback | promote. The daemon itself never needs the browser: each action is a store
write (capwatch.models_store.actions), which the running replicas pick up.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http import HTTPStatus
from http.cookies import CookieError, SimpleCookie
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

from capwatch.console import data, html
from capwatch.contracts.store import ModelStore, StoreError
from capwatch.contracts.versions import ModelRef
from capwatch.models_store.actions import (
    ACTION_KINDS,
    ASSESS_METHODS,
    ActionRefused,
    OperatorAction,
    UnknownAgent,
    action_store,
    check_known_agent,
    promote,
    request_assessment,
    review,
    rollback,
)

PREFIX = "/console"
COOKIE = "capwatch_console"
SESSION_S = 12 * 3600
MAX_BODY = 64 * 1024
CSP = ("default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; "
       "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")


@dataclass
class Response:
    status: HTTPStatus
    body: bytes
    content_type: str = "text/html; charset=utf-8"
    headers: list[tuple[str, str]] = field(default_factory=list)


class _Redirect(Exception):
    def __init__(self, location: str, cookie: str | None = None) -> None:
        super().__init__(location)
        self.location = location
        self.cookie = cookie


class _Refused(Exception):
    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status


def _utc_now() -> datetime:
    return datetime.now(UTC)


class Console:
    """Routes console requests to pages and actions; thread-safe (the store is)."""

    def __init__(self, store: ModelStore, *, token: str | None = None, read_auth: bool = False,
                 clock: Callable[[], datetime] = _utc_now, per_page: int = 50) -> None:
        if read_auth and not token:
            raise ValueError("read_auth needs a token")
        self.store = store
        self.token = token or None
        self.read_auth = read_auth
        """Pages too need a signed-in operator (the daemon's http.read_auth)."""
        self.clock = clock
        self.per_page = per_page
        self._key = hashlib.sha256(b"capwatch console\0" + self.token.encode()).digest() \
            if self.token else b""
        self.links = html.Links(PREFIX)

    # ------------------------------------------------------------------ routing

    @staticmethod
    def handles(method: str, path: str) -> bool:
        return path == PREFIX or path.startswith(PREFIX + "/") or (
            method == "POST" and path == "/api/v1/actions")

    def handle(self, method: str, target: str, headers: Mapping[str, str],
               body: bytes = b"") -> Response:
        url = urlsplit(target)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        parts = [unquote(p) for p in url.path.split("/") if p]
        try:
            if url.path == "/api/v1/actions":
                return self._api_action(headers, body)
            actor = self._actor(headers)
            if method == "POST":
                self._check_origin(headers)
                form = {k: v[-1] for k, v in parse_qs(body.decode("utf-8", "replace"),
                                                      keep_blank_values=True).items()}
                return self._post(parts[1:], form, actor, headers)
            if method not in ("GET", "HEAD"):
                raise _Refused(HTTPStatus.METHOD_NOT_ALLOWED, f"{method} is not served here")
            if self.read_auth and actor is None and parts[1:] != ["login"]:
                raise _Redirect(f"{PREFIX}/login")
            return self._page(parts[1:], query, actor, headers)
        except _Redirect as r:
            headers_out = [("Location", r.location)]
            if r.cookie is not None:
                headers_out.append(("Set-Cookie", r.cookie))
            return Response(HTTPStatus.SEE_OTHER, b"", headers=headers_out)
        except _Refused as r:
            if url.path == "/api/v1/actions":
                return _json(r.status, {"error": str(r)})
            return self._html(r.status, "capwatch console", f'<p class="error" role="alert">'
                              f"{html.e(r)}</p>", None, headers)

    # ------------------------------------------------------------------ sessions

    def _sign(self, text: str) -> str:
        return hmac.new(self._key, text.encode(), hashlib.sha256).hexdigest()

    def _actor(self, headers: Mapping[str, str]) -> str | None:
        """The signed-in operator's name, if the cookie is valid and not expired."""
        if not self.token:
            return None
        raw = _header(headers, "Cookie")
        if not raw:
            return None
        try:
            jar = SimpleCookie(raw)
        except CookieError:
            return None
        morsel = jar.get(COOKIE)
        if morsel is None:
            return None
        value = unquote(morsel.value)
        payload, _, sig = value.rpartition("|")
        if not payload or not hmac.compare_digest(sig, self._sign(payload)):
            return None
        name, _, expires = payload.rpartition("|")
        try:
            if float(expires) < time.time():
                return None
        except ValueError:
            return None
        return name or None

    def _csrf(self, headers: Mapping[str, str]) -> str:
        raw = _header(headers, "Cookie") or ""
        try:
            morsel = SimpleCookie(raw).get(COOKIE)
        except CookieError:
            morsel = None
        return self._sign("csrf|" + (unquote(morsel.value) if morsel else ""))

    @staticmethod
    def _check_origin(headers: Mapping[str, str]) -> None:
        origin = _header(headers, "Origin")
        host = _header(headers, "Host")
        if origin and origin != "null" and host and urlsplit(origin).netloc != host:
            raise _Refused(HTTPStatus.FORBIDDEN, "cross-site request refused")

    # ------------------------------------------------------------------ pages

    def _nav(self, actor: str | None, csrf: str) -> str:
        links = (f'<a class="brand" href="{PREFIX}/">capwatch</a>'
                 f'<a href="{PREFIX}/">Fleet</a><a href="{PREFIX}/alerts">Alerts</a>')
        if not self.token:
            return links + '<span>read-only (no operator token configured)</span>'
        if actor is None:
            return links + f'<a href="{PREFIX}/login">Sign in to act</a>'
        return (links + f"<span>signed in as {html.e(actor)}</span>"
                f'<form class="inline" method="post" action="{PREFIX}/logout">'
                f'<input type="hidden" name="csrf" value="{html.e(csrf)}">'
                '<button type="submit" class="secondary">Sign out</button></form>')

    def _html(self, status: HTTPStatus, title: str, body: str, actor: str | None,
              headers: Mapping[str, str]) -> Response:
        doc = html.document(title, body, nav=self._nav(actor, self._csrf(headers)))
        return Response(status, doc.encode(), headers=[
            ("Content-Security-Policy", CSP), ("X-Content-Type-Options", "nosniff"),
            ("Referrer-Policy", "same-origin"), ("Cache-Control", "no-store")])

    def _page(self, parts: list[str], query: dict[str, str], actor: str | None,
              headers: Mapping[str, str]) -> Response:
        flash = ""
        if query.get("done"):
            flash = f'<p class="flash" role="status">{html.e(query["done"])}</p>'
        if query.get("error"):
            flash = f'<p class="error" role="alert">{html.e(query["error"])}</p>'
        csrf = self._csrf(headers)
        if not parts:
            return self._html(HTTPStatus.OK, "capwatch: fleet", flash + self._fleet(query),
                              actor, headers)
        if parts == ["login"]:
            return self._html(HTTPStatus.OK, "capwatch: sign in", flash + self._login_form(),
                              actor, headers)
        if parts == ["alerts"]:
            s = action_store(self.store)
            before = _time(query.get("before"))
            alerts = s.alert_history(query.get("family") or None, query.get("agent") or None,
                                     limit=101, before=before)
            body = "<h1>Alerts</h1><p>From the store: every replica's alerts.</p>"
            body += html.alert_table(alerts[:100], self.links)
            if len(alerts) > 100:
                older = self.links.alerts(family=query.get("family"), agent=query.get("agent"),
                                          before=alerts[99].created_at.isoformat())
                body += f"<p>{html.link(older, 'older alerts →')}</p>"
            return self._html(HTTPStatus.OK, "capwatch: alerts", flash + body, actor, headers)
        if len(parts) == 3 and parts[0] == "agents":
            family, agent = parts[1], parts[2]
            row = next(iter(data.fleet(self.store, family, only=agent)), None)
            if row is None:
                raise _Refused(HTTPStatus.NOT_FOUND, f"no agent {agent} of {family}")
            view = data.agent_view(self.store, family, agent, row)
            forms: dict[str, str] = {}
            agent_forms = ""
            if actor is not None:
                agent_forms = self._agent_forms(view, csrf)
                forms = self._version_forms(view, csrf)
            body = html.agent_page(view, self.links, version_forms=forms,
                                   agent_forms=agent_forms)
            return self._html(HTTPStatus.OK, f"capwatch: {agent}", flash + body, actor,
                              headers)
        if len(parts) == 2 and parts[0] == "families":
            family = parts[1]
            if self.store.latest(family, None) is None:
                raise _Refused(HTTPStatus.NOT_FOUND, f"no family {family}")
            body = html.family_page(data.family_view(self.store, family), self.links)
            return self._html(HTTPStatus.OK, f"capwatch: {family}", flash + body, actor,
                              headers)
        raise _Refused(HTTPStatus.NOT_FOUND, "no such page")

    def _fleet(self, query: dict[str, str]) -> str:
        rows = data.fleet(self.store)
        state = query.get("state", "")
        state = state if state in data.STATES else ""
        sort = query.get("sort", "state")
        sort = sort if sort in data.SORT_KEYS else "state"
        descending = query.get("desc") == "1"
        per_page = _int(query.get("per_page"), self.per_page)
        page = data.select(rows, state=state or None, text=query.get("q") or None, sort=sort,
                           descending=descending, page=_int(query.get("page"), 1),
                           per_page=per_page)
        families = sorted({r.family for r in self.store.lineages() if r.agent_id is None})
        return html.fleet_page(page, self.links, state=state, text=query.get("q", ""),
                               sort=sort, descending=descending, per_page=per_page,
                               families=families)

    def _login_form(self) -> str:
        if not self.token:
            return "<p>This console is read-only: the daemon has no operator token.</p>"
        return (f'<h1>Sign in</h1><form class="action" method="post" action="{PREFIX}/login">'
                '<p><label for="name">Your name (recorded with every action)</label>'
                '<input type="text" id="name" name="name" required maxlength="200" '
                'autocomplete="username"></p>'
                '<p><label for="token">Operator token</label>'
                '<input type="password" id="token" name="token" required '
                'autocomplete="current-password"></p>'
                '<button type="submit">Sign in</button></form>')

    def _hidden(self, csrf: str, **fields: str) -> str:
        out = f'<input type="hidden" name="csrf" value="{html.e(csrf)}">'
        return out + "".join(
            f'<input type="hidden" name="{html.e(k)}" value="{html.attr(v)}">'
            for k, v in fields.items())

    @staticmethod
    def _reason(ident: str) -> str:
        return (f'<label for="{ident}">Why</label>'
                f'<input type="text" id="{ident}" name="reason" required maxlength="2000" '
                'size="40">')

    def _agent_forms(self, view: data.AgentView, csrf: str) -> str:
        ident = "assess-reason"
        methods = "".join(f'<option value="{m}"{" selected" if m == "verify" else ""}>{m}'
                          "</option>" for m in ASSESS_METHODS)
        return (f'<form class="action" method="post" action="{PREFIX}/actions" '
                'aria-label="Assess now">'
                + self._hidden(csrf, kind="assess", family=view.family, agent=view.agent_id)
                + '<strong>Assess this agent now</strong> '
                '<label for="assess-method">Method</label>'
                f'<select id="assess-method" name="method">{methods}</select> '
                + self._reason(ident) + ' <button type="submit">Queue assessment</button>'
                "</form>")

    def _version_forms(self, view: data.AgentView, csrf: str) -> dict[str, str]:
        forms: dict[str, str] = {}
        current = view.row.version if view.row is not None else None
        for v in view.versions:
            ref = v.version.ref
            slug = f"{ref.agent_id or 'baseline'}-{ref.version}"
            parts = []
            if ref.agent_id is not None and v.action is None:  # learned, not an operator's
                for kind, label in (("approve", "Approve"), ("reject", "Reject")):
                    parts.append(self._form(csrf, kind, view, ref, f"{kind}-{slug}",
                                            f"{label} this version"))
                parts.append(self._form(csrf, "promote", view, ref, f"promote-{slug}",
                                        "Promote to family baseline"))
            if current is not None and current.agent_id is not None and ref != current:
                parts.append(self._form(csrf, "rollback", view, ref, f"rollback-{slug}",
                                        "Roll the agent back to this version"))
            forms[str(ref)] = "".join(parts)
        return forms

    def _form(self, csrf: str, kind: str, view: data.AgentView, ref: ModelRef, ident: str,
              label: str) -> str:
        return (f'<form class="action" method="post" action="{PREFIX}/actions" '
                f'aria-label="{html.e(label)} ({html.e(ref)})">'
                + self._hidden(csrf, kind=kind, family=view.family, agent=view.agent_id,
                               ref_agent=ref.agent_id or "", ref_version=str(ref.version))
                + self._reason(ident)
                + f' <button type="submit" id="btn-{html.e(ident)}">{html.e(label)}</button>'
                "</form>")

    # ------------------------------------------------------------------ actions

    def _post(self, parts: list[str], form: dict[str, str], actor: str | None,
              headers: Mapping[str, str]) -> Response:
        if not self.token:
            raise _Refused(HTTPStatus.FORBIDDEN,
                           "this console is read-only: the daemon has no operator token")
        if parts == ["login"]:
            name = form.get("name", "").strip()
            if not name or len(name) > 200 or "|" in name:
                raise _Redirect(f"{PREFIX}/login?error=" + quote("give your name "
                                                                 "(no '|')"))
            if not hmac.compare_digest(form.get("token", "").encode(), self.token.encode()):
                raise _Redirect(f"{PREFIX}/login?error=" + quote("wrong operator token"))
            payload = f"{name}|{time.time() + SESSION_S:.0f}"
            value = quote(f"{payload}|{self._sign(payload)}", safe="")
            raise _Redirect(f"{PREFIX}/", f"{COOKIE}={value}; Path={PREFIX}; HttpOnly; "
                                          f"SameSite=Strict; Max-Age={SESSION_S}")
        if actor is None:
            raise _Refused(HTTPStatus.UNAUTHORIZED, "sign in first")
        if not hmac.compare_digest(form.get("csrf", ""), self._csrf(headers)):
            raise _Refused(HTTPStatus.FORBIDDEN, "the form is stale or not from this console:"
                                                 " reload the page")
        if parts == ["logout"]:
            raise _Redirect(f"{PREFIX}/", f"{COOKIE}=; Path={PREFIX}; HttpOnly; "
                                          "SameSite=Strict; Max-Age=0")
        if parts != ["actions"]:
            raise _Refused(HTTPStatus.NOT_FOUND, "no such action")
        family, agent = form.get("family", ""), form.get("agent", "")
        back = self.links.agent(family, agent) or f"{PREFIX}/"
        try:
            action = self.act(form.get("kind", ""), family, agent, form.get("ref_agent"),
                              form.get("ref_version"), form.get("method"), actor,
                              form.get("reason", ""))
        except (ActionRefused, StoreError, ValueError) as exc:
            raise _Redirect(f"{back}?error=" + quote(str(exc))) from None
        raise _Redirect(f"{back}?done=" + quote("recorded: " + action.describe()))

    def act(self, kind: str, family: str, agent: str, ref_agent: str | None,
            ref_version: str | None, method: str | None, actor: str, reason: str,
            key: str | None = None) -> OperatorAction:
        """Perform one operator action (the pages' forms and the JSON API share this)."""
        if kind not in ACTION_KINDS:
            raise ActionRefused(f"unknown action {kind!r}")
        if not family or not agent:
            raise ActionRefused("an action names a family and an agent")
        s = action_store(self.store)
        now = self.clock()
        if kind == "assess":
            check_known_agent(s, family, agent)
            return request_assessment(s, family, agent, method or "verify", actor, reason,
                                      now, key)
        try:
            ref = ModelRef(family, ref_agent or None, int(ref_version or ""))
        except ValueError:
            raise ActionRefused("the action needs the version it is about") from None
        if kind in ("approve", "reject"):
            return review(s, kind, ref, actor, reason, now, key)
        if kind == "rollback":
            return rollback(s, family, agent, ref, actor, reason, now, key)
        return promote(s, ref, actor, reason, now, key)

    def _api_action(self, headers: Mapping[str, str], body: bytes) -> Response:
        if not self.token:
            raise _Refused(HTTPStatus.FORBIDDEN, "no operator token is configured: read-only")
        auth = _header(headers, "Authorization") or ""
        scheme, _, given = auth.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.encode(),
                                                                 self.token.encode()):
            raise _Refused(HTTPStatus.UNAUTHORIZED, "Authorization: Bearer <operator token>")
        try:
            req = json.loads(body or b"{}")
            if not isinstance(req, dict):
                raise ValueError("not an object")
        except ValueError as exc:
            raise _Refused(HTTPStatus.BAD_REQUEST, f"the body must be a JSON object: {exc}"
                           ) from None
        version = req.get("version") or {}
        try:
            action = self.act(str(req.get("kind", "")), str(req.get("family", "")),
                              str(req.get("agent_id", "")),
                              version.get("agent_id") if isinstance(version, dict) else None,
                              str(version.get("version", "")) if isinstance(version, dict)
                              else None, req.get("method"), str(req.get("actor", "")),
                              str(req.get("reason", "")), req.get("key"))
        except UnknownAgent as exc:
            raise _Refused(HTTPStatus.NOT_FOUND, str(exc)) from None
        except ActionRefused as exc:
            raise _Refused(HTTPStatus.CONFLICT, str(exc)) from None
        return _json(HTTPStatus.CREATED, action.to_json())


def _header(headers: Mapping[str, str], name: str) -> str | None:
    for k, v in headers.items():
        if k.lower() == name.lower():
            return v
    return None


def _json(status: HTTPStatus, obj: Any) -> Response:
    return Response(status, json.dumps(obj).encode(), "application/json")


def _int(text: str | None, default: int) -> int:
    try:
        return int(text) if text else default
    except ValueError:
        return default


def _time(text: str | None) -> datetime | None:
    if not text:
        return None
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=UTC)
