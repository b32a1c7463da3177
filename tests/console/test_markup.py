"""The console's rendering of stored text the wire's rule now refuses (wire_text): on a
page and in the command line's tables, a bidi override or a zero-width space is shown as
its escape, never as itself."""

from __future__ import annotations

import pytest

from capwatch.console.markup import attr, e
from capwatch.console.text import table
from capwatch.contracts.wire_text import visible


@pytest.mark.parametrize(("text", "shown"), [
    ("d1\u202ew2", "d1\\u202ew2"),  # right-to-left override
    ("d1\u200b", "d1\\u200b"),  # zero-width space
    ("\u2066x\u2069", "\\u2066x\\u2069"),  # isolates
    ("\ufeffbom", "\\ufeffbom"),
    ("a\x7fb\x00", "a\\u007fb\\u0000"),
    ("p\ue000", "p\\ue000"),  # private use
    ("p\U000f0000", "p\\U000f0000"),
    ("para\u2029graph", "para\\u2029graph"),
    ("(at r1 w1)\n\t(done)\r\n", "(at r1 w1)\n\t(done)\r\n"),  # layout kept
    ("caf\u00e9 cafe\u0301 \u4e16\u754c x\u00a0y", "caf\u00e9 cafe\u0301 \u4e16\u754c x\u00a0y"),
])
def test_visible_writes_what_the_wire_refuses_as_its_escape(text: str, shown: str) -> None:
    assert visible(text) == shown


def test_a_page_value_is_escaped_and_a_form_value_kept() -> None:
    assert e('<b title="x">d1\u202e</b>') == "&lt;b title=&quot;x&quot;&gt;d1\\u202e&lt;/b&gt;"
    assert attr('rover\u200bv3 "q"') == "rover\u200bv3 &quot;q&quot;"


def test_the_command_lines_tables_show_escapes() -> None:
    out = table(["FAMILY", "AGENT"], [["rover\u202ev3", "a-1"], ["rover-v3", "a-2"]])
    assert "\u202e" not in out
    assert out.splitlines()[1] == "rover\\u202ev3  a-1"
