"""The console's pages and actions through Console.handle (no browser, real SQLite store)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import unquote, urlencode

import pytest

from capwatch.console.web import Console, Response
from capwatch.contracts.store import ModelStore, OutboxAlert
from capwatch.model.pddl_reader import read_domain
from capwatch.models_store import open_store, record_new_model
from capwatch.models_store.actions import AgentActivity, action_store
from tests.paths import REPO_ROOT

EXAMPLES = REPO_ROOT / "capwatch" / "examples"
T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
TOKEN = "a-token-long-enough-1234"
HOST = {"Host": "capwatch.test"}


@pytest.fixture
def store(tmp_path: Path) -> ModelStore:
    s = open_store(str(tmp_path / "models.db"))
    record_new_model(s, "rover-v3", None, read_domain(EXAMPLES / "rover.pddl"), T0)
    record_new_model(s, "rover-v3", "rover-17", read_domain(EXAMPLES / "rover-sample-drift.pddl"),
                     T0 + timedelta(hours=1), evidence={"queries": 7})
    action_store(s).save_activity([AgentActivity("rover-v3", f"rover-{i:02d}", 10, 0,
                                                 T0 + timedelta(hours=2), "r")
                                   for i in range(20)])
    return s


def get(c: Console, path: str, cookie: str | None = None) -> Response:
    headers = dict(HOST)
    if cookie:
        headers["Cookie"] = cookie
    return c.handle("GET", path, headers)


def post(c: Console, path: str, form: dict[str, str], cookie: str | None = None,
         origin: str | None = "http://capwatch.test") -> Response:
    headers = dict(HOST)
    if cookie:
        headers["Cookie"] = cookie
    if origin:
        headers["Origin"] = origin
    return c.handle("POST", path, headers, urlencode(form).encode())


def header(r: Response, name: str) -> str:
    return next(v for k, v in r.headers if k == name)


def sign_in(c: Console, name: str = "alice") -> tuple[str, str]:
    r = post(c, "/console/login", {"name": name, "token": TOKEN})
    assert r.status == 303
    cookie = header(r, "Set-Cookie").split(";")[0]
    assert "HttpOnly" in header(r, "Set-Cookie") and "SameSite=Strict" in header(r, "Set-Cookie")
    page = get(c, "/console/agents/rover-v3/rover-17", cookie).body.decode()
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert csrf is not None
    return cookie, csrf.group(1)


def test_read_only_without_a_token(store: ModelStore) -> None:
    c = Console(store)
    page = get(c, "/console/agents/rover-v3/rover-17").body.decode()
    assert "read-only" in page and "<form class=\"action\"" not in page
    assert "now requires (battery_full ?r)" in page
    r = post(c, "/console/actions", {"kind": "approve"})
    assert r.status == 403
    r = c.handle("POST", "/api/v1/actions", HOST, b"{}")
    assert r.status == 403
    assert action_store(store).actions() == []


def test_fleet_pages_filters_and_sorts(store: ModelStore) -> None:
    c = Console(store, per_page=8)
    page = get(c, "/console/?sort=agent").body.decode()
    assert "20 agents match; page 1 of 3." in page  # rover-17 is one of the 20
    assert len(re.findall(r'href="/console/agents/', page)) == 8
    last = get(c, "/console/?sort=agent&page=3").body.decode()
    assert len(re.findall(r'href="/console/agents/', last)) == 4
    drifted = get(c, "/console/?state=drifted").body.decode()
    assert "1 agents match" in drifted and "/console/agents/rover-v3/rover-17" in drifted
    text = get(c, "/console/?q=rover-0&sort=agent&desc=1").body.decode()
    ids = re.findall(r'href="/console/agents/rover-v3/([^"]+)"', text)
    assert ids == sorted(ids, reverse=True) and all(i.startswith("rover-0") for i in ids)
    r = get(c, "/console/agents/rover-v3/nobody")
    assert r.status == 404
    csp = header(get(c, "/console/"), "Content-Security-Policy")
    assert "default-src 'none'" in csp and "script" not in csp


def test_sign_in_csrf_and_actions(store: ModelStore) -> None:
    c = Console(store, token=TOKEN)
    r = post(c, "/console/login", {"name": "alice", "token": "wrong"})
    assert r.status == 303 and "wrong operator token" in unquote(header(r, "Location"))
    cookie, csrf = sign_in(c)
    form = {"kind": "approve", "family": "rover-v3", "agent": "rover-17",
            "ref_agent": "rover-17", "ref_version": "1", "reason": "checked", "csrf": csrf}
    # Without the form's CSRF token, from another site, or with a forged cookie: refused.
    assert post(c, "/console/actions", {**form, "csrf": "0" * 64}, cookie).status == 403
    assert post(c, "/console/actions", form, cookie, origin="http://evil.test").status == 403
    forged = cookie.replace("alice", "mallory")
    assert post(c, "/console/actions", form, forged).status == 401
    assert action_store(store).actions() == []
    r = post(c, "/console/actions", form, cookie)
    assert r.status == 303
    assert "recorded: alice approved rover-v3/rover-17@1: checked" in unquote(
        header(r, "Location"))
    page = get(c, "/console/agents/rover-v3/rover-17", cookie).body.decode()
    assert "<strong>Approved</strong> by alice" in page
    # A refused action comes back as a message on the page, and records nothing.
    r = post(c, "/console/actions", {**form, "kind": "rollback", "ref_agent": "",
                                     "ref_version": "7"}, cookie)
    assert "error=" in header(r, "Location")
    assert len(action_store(store).actions()) == 1


def test_api_actions_need_the_bearer_token(store: ModelStore) -> None:
    c = Console(store, token=TOKEN)
    body = json.dumps({"kind": "rollback", "family": "rover-v3", "agent_id": "rover-17",
                       "version": {"agent_id": None, "version": 1}, "actor": "ci-bot",
                       "reason": "reverted firmware", "key": "k-1"}).encode()
    r = c.handle("POST", "/api/v1/actions", {"Authorization": "Bearer nope"}, body)
    assert r.status == 401
    r = c.handle("POST", "/api/v1/actions", {"Authorization": f"Bearer {TOKEN}"}, body)
    assert r.status == 201
    assert json.loads(r.body)["result"]["version"]["version"] == 2
    again = c.handle("POST", "/api/v1/actions", {"Authorization": f"Bearer {TOKEN}"}, body)
    assert again.status == 201 and json.loads(again.body) == json.loads(r.body)
    bad = c.handle("POST", "/api/v1/actions", {"Authorization": f"Bearer {TOKEN}"}, b"[1]")
    assert bad.status == 400
    conflict = c.handle("POST", "/api/v1/actions", {"Authorization": f"Bearer {TOKEN}"},
                        body.replace(b"k-1", b"k-2"))
    assert conflict.status == 409 and b"already holds" in conflict.body


def test_ten_thousand_agents_are_paged(tmp_path: Path) -> None:
    s = open_store(str(tmp_path / "big.db"))
    record_new_model(s, "rover-v3", None, read_domain(EXAMPLES / "rover.pddl"), T0)
    action_store(s).save_activity([AgentActivity("rover-v3", f"r-{i:05d}", 1, 0, T0, "r")
                                   for i in range(10_000)])
    c = Console(s, per_page=50)
    page = get(c, "/console/?sort=agent&page=7").body.decode()
    assert "10000 agents match; page 7 of 200." in page
    ids = re.findall(r'href="/console/agents/rover-v3/(r-\d+)"', page)
    assert ids == [f"r-{i:05d}" for i in range(300, 350)]
    assert len(page) < 100_000  # one page, not the fleet


def test_fleet_row_says_when_a_version_changed_more_than_one_action(tmp_path: Path) -> None:
    """oper18b: an agent whose version changed two actions (drive keeps (at ?v ?l1), drop
    no longer needs (capacity ?v ?s1)) showed only the first line in the fleet page's "What
    changed" column, and nothing said there was more: an operator scanning the fleet read
    one change. The row now says how many more lines the version has."""
    ipc = REPO_ROOT / "tests" / "data" / "domains"
    s = open_store(str(tmp_path / "models.db"))
    record_new_model(s, "transport", None, read_domain(ipc / "ipc" / "transport" / "domain.pddl"),
                     T0)
    record_new_model(s, "transport", "truck-1", read_domain(
        ipc / "own" / "ipc-drifts" / "transport" / "drive-and-drop.pddl"), T0 + timedelta(hours=1))
    page = get(Console(s), "/console/?state=drifted").body.decode()
    row = re.search(r"<tr><td[^>]*><a[^>]*>truck-1</a>.*?</tr>", page)
    assert row is not None
    assert "(+1 more)" in row.group(0)
    assert "drive(?v ?l1 ?l2) no longer makes (at ?v ?l1) false" in row.group(0)


def test_an_agent_reverted_to_the_baseline_within_its_intervals_reads_healthy(
        tmp_path: Path) -> None:
    """oper20: agent hslip drifted 0.8 -> 0.5 (version 1) and reverted; version 2
    estimated 0.792 [0.775, 0.809], whose interval holds the baseline's 0.8, yet the agent
    read "drifted" for good. The rule is the assessor's own for keeping a model: every
    baseline probability within the version's simultaneous interval. An estimate whose
    interval leaves the baseline's probability out is still a drift."""
    from capwatch.console import data
    from tests.daemon.helpers import reverted_pick

    s = open_store(str(tmp_path / "m.db"))
    reverted_pick(s, T0)
    states = {r.agent_id: r.state for r in data.fleet(s)}
    # c0: 0.88 in [0.85, 0.91] holds the baseline's 0.9. c1: [0.77, 0.83] does not; c2:
    # a version without an estimate is not taken for the baseline either.
    assert states == {"c0": "healthy", "c1": "drifted", "c2": "drifted"}
    page = get(Console(s), "/console/agents/courier-v1/c0").body.decode()
    assert "within its intervals" in page


FORMAT = re.compile("[\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]")
"""Unicode Cf characters the tests store (bidi overrides and isolates, zero-width)."""


def test_stored_format_characters_are_shown_escaped_and_acted_on_as_stored(
        tmp_path: Path) -> None:
    """Names stored before the wire refused them (session 20): a right-to-left override
    shown raw reordered the rest of its row, a zero-width space made two families look
    alike. Shown as escapes; a form's hidden field keeps the stored name, so an action
    on such an agent still names it."""
    s = open_store(str(tmp_path / "models.db"))
    family = "rover\u200bv3"
    record_new_model(s, family, None, read_domain(EXAMPLES / "rover.pddl"), T0)
    action_store(s).save_activity([AgentActivity(family, "a-1", 3, 0, T0, "r")])
    s.add_alerts([OutboxAlert("k1", f"capability_reduced|{family}|a-1", "g", family,
                              "capability_reduced",
                              {"agent_id": "a-1", "summary": "d1\u202e moved at w2",
                               "evidence": {"object": "d1\u2066"}}, T0)])
    c = Console(s, token=TOKEN)
    cookie = header(post(c, "/console/login", {"name": "alice", "token": TOKEN}),
                    "Set-Cookie").split(";")[0]
    fleet = get(c, "/console/").body.decode()
    assert FORMAT.search(fleet) is None
    assert "rover\\u200bv3" in fleet
    assert 'href="/console/agents/rover%E2%80%8Bv3/a-1"' in fleet  # the link names it
    alerts = get(c, "/console/alerts").body.decode()
    assert FORMAT.search(alerts) is None
    assert "d1\\u202e moved at w2" in alerts and "d1\\u2066" in alerts
    r = get(c, "/console/agents/rover%E2%80%8Bv3/a-1", cookie)
    page = r.body.decode()
    assert r.status == 200 and "rover\\u200bv3" in page
    fields = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">',
                             page.split('aria-label="Assess now">')[1]))
    assert fields["family"] == family  # as stored, not escaped: the only raw one
    assert FORMAT.findall(page) == ["\u200b"]
    r = post(c, "/console/actions", {**fields, "method": "verify", "reason": "look"}, cookie)
    assert r.status == 303 and "error" not in header(r, "Location")
    (done,) = action_store(s).actions()
    assert (done.kind, done.family, done.agent_id) == ("assess", family, "a-1")
