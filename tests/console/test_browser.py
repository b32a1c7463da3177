"""The console in a real browser: Debian's headless Chromium driven by Selenium, against
``capwatch demo --serve`` (the daemon, its workers and the web console over the demo's
store, the simulated agents answering queries).

The test finds the drifted agents, approves one version and rolls another agent back in
the browser, asks for an assessment, and waits for the running daemon to carry the
actions out. Screenshots of the main pages go to build/screenshots/ for review. Every page
must load without a browser console error, label its form fields, keep text contrast at
WCAG AA and show where the keyboard focus is.
"""

from __future__ import annotations

import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.paths import REPO_ROOT

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.chrome.service import Service as ChromeService  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

pytestmark = pytest.mark.integration

SCREENSHOTS = REPO_ROOT / "build" / "screenshots"
TOKEN = "browser-test-token-0123456789"
PAGE_WAIT_S = 60
"""How long a page may take to come after a click: generous, a loaded 2-core machine runs
the console, its daemon and Chromium at once (a page that comes goes on at once)."""

CONTRAST_JS = """
function lum(c) {
  const v = c.map(x => {
    x /= 255; return x <= 0.03928 ? x / 12.92 : Math.pow((x + 0.055) / 1.055, 2.4); });
  return 0.2126 * v[0] + 0.7152 * v[1] + 0.0722 * v[2];
}
function rgb(s) { const m = s.match(/[\\d.]+/g); return m ? m.map(Number) : [0, 0, 0, 0]; }
function bg(el) {
  for (; el; el = el.parentElement) {
    const c = rgb(getComputedStyle(el).backgroundColor);
    if (c.length < 4 || c[3] > 0) return c.slice(0, 3);
  }
  return [255, 255, 255];
}
const bad = [];
for (const el of document.querySelectorAll('body *')) {
  const own = [...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim());
  if (!own || el.closest('svg') || !el.getClientRects().length) continue;
  const st = getComputedStyle(el);
  const a = lum(rgb(st.color)), b = lum(bg(el));
  const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
  const size = parseFloat(st.fontSize);
  const large = size >= 24 || (size >= 18.66 && parseInt(st.fontWeight) >= 700);
  if (ratio < (large ? 3 : 4.5))
    bad.push(el.tagName + ' "' + el.textContent.trim().slice(0, 40) + '" ' + ratio.toFixed(2));
}
return bad;
"""

UNLABELLED_JS = """
return [...document.querySelectorAll('input:not([type=hidden]), select, textarea')].filter(el =>
  !(el.id && document.querySelector('label[for="' + el.id + '"]')) && !el.closest('label')
  && !el.getAttribute('aria-label')).map(el => el.outerHTML.slice(0, 80));
"""


@pytest.fixture(scope="module")
def console_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("served")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; from capwatch.cli import main; sys.exit(main())",
         "demo", "--serve", "--port", "0", "--token", TOKEN, "--store", str(tmp / "demo.db")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp)
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stdout is not None
    out = proc.stdout

    def pump() -> None:
        for line in out:
            lines.put(line)
        lines.put("")

    threading.Thread(target=pump, daemon=True).start()
    seen = []
    url = None
    try:
        while url is None:
            line = lines.get(timeout=120)  # the demo's run, then the console's address
            seen.append(line)
            if not line:
                pytest.fail("capwatch demo --serve ended:\n" + "".join(seen))
            m = re.match(r"The console: (http://\S+)", line)
            if m:
                url = m.group(1)
        yield url
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    assert chromium and driver, "install Debian's chromium and chromium-driver (.ci/run does)"
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,1400"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    b = webdriver.Chrome(service=ChromeService(executable_path=driver), options=opts)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    try:
        yield b
    finally:
        b.quit()


def page_ok(b: Any, shot: str | None = None) -> None:
    """No console error, every field labelled, AA contrast; then the screenshot."""
    errors = [e for e in b.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == [], errors
    assert b.execute_script(UNLABELLED_JS) == []
    assert b.execute_script(CONTRAST_JS) == []
    if shot is not None:
        height = b.execute_script("return document.documentElement.scrollHeight")
        b.set_window_size(1280, min(max(900, height), 6000))
        b.save_screenshot(str(SCREENSHOTS / f"{shot}.png"))
        b.set_window_size(1280, 1400)


def reason(b: Any, form_label: str, text: str) -> Any:
    form = b.find_element(By.CSS_SELECTOR, f'form[aria-label="{form_label}"]')
    form.find_element(By.NAME, "reason").send_keys(text)
    return form


def submit(form: Any, b: Any) -> str:
    """Click the form's button and return the message the page it leads to shows (the
    POST answers with a redirect: wait for the page after it, not the one before)."""
    form.find_element(By.TAG_NAME, "button").click()

    def message(driver: Any) -> Any:
        found = driver.find_elements(By.CSS_SELECTOR, '[role="status"], [role="alert"]')
        return found[0] if found else False

    shown = WebDriverWait(b, PAGE_WAIT_S).until(message)
    assert shown.get_attribute("role") == "status", shown.text
    return str(shown.text)


def wait_for(b: Any, url: str, pattern: str, timeout: float = 90) -> None:
    """Reload ``url`` until its text matches: the daemon carries actions out on its own
    schedule (its workers poll the queue)."""
    def ready(driver: Any) -> bool:
        driver.get(url)
        return re.search(pattern, driver.find_element(By.TAG_NAME, "body").text) is not None

    WebDriverWait(b, timeout, poll_frequency=0.5).until(ready)


def test_find_the_drift_approve_roll_back_and_assess(console_url: str, browser: Any) -> None:
    b = browser
    b.get(console_url)
    assert b.title == "capwatch: fleet"
    assert "read-only" not in b.page_source
    page_ok(b, "01-fleet")

    # Keyboard: the first Tab stops are the navigation links, and focus is drawn.
    body = b.find_element(By.TAG_NAME, "body")
    body.send_keys(Keys.TAB)
    first = b.switch_to.active_element
    assert first.tag_name == "a" and first.text == "capwatch"
    assert b.execute_script("return getComputedStyle(arguments[0]).outlineStyle", first) \
        != "none"

    # Find the drifted agents with the filter form.
    Select(b.find_element(By.ID, "state")).select_by_value("drifted")
    b.find_element(By.CSS_SELECTOR, 'form[role="search"] button').click()
    WebDriverWait(b, PAGE_WAIT_S).until(
        lambda d: "state=drifted" in d.current_url and d.find_elements(
            By.CSS_SELECTOR, 'option[value="drifted"][selected]'))
    agents = [a.text for a in b.find_elements(By.CSS_SELECTOR, 'a[href*="/agents/"]')]
    assert sorted(agents) == ["courier-v1-002", "courier-v1-007", "rover-v3-004"]
    page_ok(b, "02-fleet-drifted")

    # What changed and why: the rover's new precondition, the courier's probabilities.
    b.find_element(By.LINK_TEXT, "rover-v3-004").click()
    WebDriverWait(b, PAGE_WAIT_S).until(lambda d: d.title == "capwatch: rover-v3-004")
    text = b.find_element(By.TAG_NAME, "body").text
    assert "now requires (battery_full ?r)" in text and "Sign in to act" in text
    assert b.find_elements(By.CSS_SELECTOR, "form.action") == []  # not signed in
    page_ok(b, "03-agent-rover-v3-004")
    b.get(f"{console_url}agents/courier-v1/courier-v1-007")
    assert b.find_element(By.CSS_SELECTOR, 'svg[role="img"] title').get_attribute(
        "textContent") == "Outcome probabilities of pick"
    page_ok(b, "04-agent-courier-v1-007-probabilities")

    # Sign in with the keyboard.
    b.get(f"{console_url}login")
    page_ok(b, None)
    b.find_element(By.ID, "name").send_keys("alice")
    b.find_element(By.ID, "token").send_keys(TOKEN, Keys.ENTER)
    WebDriverWait(b, PAGE_WAIT_S).until(lambda d: "signed in as alice" in d.page_source)

    # Approve courier-v1-002's learned version.
    b.get(f"{console_url}agents/courier-v1/courier-v1-002")
    page_ok(b, "05-agent-courier-v1-002-signed-in")
    form = reason(b, "Approve this version (courier-v1/courier-v1-002@1)",
                  "matches the gripper jam report")
    status = submit(form, b)
    assert status == ("recorded: alice approved courier-v1/courier-v1-002@1: matches the "
                      "gripper jam report")
    assert "Approved by alice" in b.find_element(By.TAG_NAME, "body").text
    page_ok(b, "06-approved")

    # Roll rover-v3-004 back to the baseline; the running daemon installs it.
    agent_url = f"{console_url}agents/rover-v3/rover-v3-004"
    b.get(agent_url)
    form = reason(b, "Roll the agent back to this version (rover-v3/baseline@1)",
                  "battery firmware reverted")
    assert "alice rolled back to rover-v3/baseline@1" in submit(form, b)
    wait_for(b, agent_url, r"state healthy; runs rover-v3/rover-v3-004@2")
    text = b.find_element(By.TAG_NAME, "body").text
    assert "Written by an operator: alice rolled back to rover-v3/baseline@1: battery " \
           "firmware reverted" in text
    page_ok(b, "07-rolled-back")

    # Ask for an assessment of an agent nothing was wrong with: verify, no change.
    healthy_url = f"{console_url}agents/rover-v3/rover-v3-001"
    b.get(healthy_url)
    form = reason(b, "Assess now", "spot check after the firmware rollout")
    Select(form.find_element(By.NAME, "method")).select_by_value("verify")
    assert "alice asked for an assessment (verify)" in submit(form, b)
    wait_for(b, healthy_url, r"last event [^\n]*\(assessment done\)")
    assert "alice asked for an assessment (verify)" in b.find_element(By.TAG_NAME, "body").text

    # The family: which agents share which change, the PDDL with it marked.
    b.get(f"{console_url}families/courier-v1")
    assert b.find_elements(By.CSS_SELECTOR, "pre.pddl span.changed")
    page_ok(b, "08-family-courier-v1")
    b.get(f"{console_url}alerts")
    assert "capability_reduced" in b.page_source
    page_ok(b, "09-alerts")


ORDER_JS = """
const want = arguments[0];
const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
for (let n = walker.nextNode(); n; n = walker.nextNode()) {
  if (!n.data.includes(want[0]) || !n.data.includes(want[want.length - 1])) continue;
  return want.map(s => {
    const r = document.createRange(), i = n.data.indexOf(s);
    r.setStart(n, i); r.setEnd(n, i + s.length);
    return r.getBoundingClientRect().left;
  });
}
return null;
"""
"""Where each of the given pieces of one text node is drawn, left edge in pixels."""


@pytest.fixture
def served_console(tmp_path: Any) -> Iterator[str]:
    """The console alone over a store holding names stored before the wire's rule (a
    zero-width space in a family, a right-to-left override in an alert's summary)."""
    from datetime import UTC, datetime
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from capwatch.console.web import Console
    from capwatch.contracts.store import OutboxAlert
    from capwatch.model.pddl_reader import read_domain
    from capwatch.models_store import open_store, record_new_model
    from capwatch.models_store.actions import AgentActivity, action_store

    t0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
    store = open_store(str(tmp_path / "models.db"))
    family = "rover\u200bv3"
    record_new_model(store, family, None,
                     read_domain(REPO_ROOT / "capwatch" / "examples" / "rover.pddl"), t0)
    action_store(store).save_activity([AgentActivity(family, "a-1", 3, 0, t0, "r")])
    store.add_alerts([OutboxAlert("k1", f"capability_reduced|{family}|a-1", "g", family,
                                  "capability_reduced",
                                  {"agent_id": "a-1", "summary": "d1\u202e moved at w2"},
                                  t0)])
    console = Console(store)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            r = console.handle("GET", self.path, dict(self.headers.items()))
            self.send_response(r.status)
            self.send_header("Content-Type", r.content_type)
            for k, v in r.headers:
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(r.body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/console/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
        store.close()


def test_stored_bidi_and_zero_width_characters_are_drawn_as_escapes(
        served_console: str, browser: Any) -> None:
    """Drawn raw, the override drew the rest of the summary right to left ("d1", then
    "2w ta devom"); the zero-width space made "rover<U+200B>v3" look like "rover-v3"
    without the hyphen, i.e. like another family. Escaped, both read as stored."""
    b = browser
    b.get(f"{served_console}alerts")
    text = b.find_element(By.TAG_NAME, "body").text
    assert "d1\\u202e moved at w2" in text
    assert not re.search("[\u200b\u202e]", b.page_source)
    d1, moved, w2 = b.execute_script(ORDER_JS, ["d1", "moved", "w2"])
    assert d1 < moved < w2  # left to right, as written
    page_ok(b, "10-stored-format-characters")
    # The alert's link names the family as stored: it leads to the agent's page.
    b.find_element(By.LINK_TEXT, "rover\\u200bv3/a-1").click()
    WebDriverWait(b, PAGE_WAIT_S).until(lambda d: "/agents/" in d.current_url)
    body = b.find_element(By.TAG_NAME, "body").text
    assert "Agent a-1" in body and "rover\\u200bv3" in body
    page_ok(b)
