"""How the daemon names an error in logs, /readyz and dead letters: the class once."""

from __future__ import annotations

import pytest
from kafka.errors import KafkaTimeoutError, RequestTimedOutError

from capwatch.daemon.infra import error_text


@pytest.mark.parametrize(("error", "text"), [
    (RuntimeError("boom"), "RuntimeError: boom"),
    (KafkaTimeoutError("Unable to bootstrap"), "KafkaTimeoutError: Unable to bootstrap"),
    (RequestTimedOutError("Request timed out"),
     "[Error 7] RequestTimedOutError: Request timed out"),
    (ValueError("a RuntimeError: is only mentioned"), "ValueError: a RuntimeError: is only "
                                                        "mentioned"),
])
def test_the_class_is_named_once(error: BaseException, text: str) -> None:
    assert error_text(error) == text
