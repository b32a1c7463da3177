"""How an error is named in logs, /readyz and dead letters, by the daemon and the adapters
alike (capwatch/contracts/errors.py): the class once."""

from __future__ import annotations

import pytest
from kafka.errors import KafkaTimeoutError, RequestTimedOutError

from capwatch.adapters.io.kafka_liveness import BrokerLiveness
from capwatch.contracts.errors import error_text


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


def test_the_kafka_probe_names_the_class_once_on_readyz() -> None:
    """It read 'RequestTimedOutError: [Error 7] RequestTimedOutError: ...'."""
    now = [100.0]

    def probe() -> object:
        raise RequestTimedOutError("Request timed out")

    live = BrokerLiveness("b:9092", "t", timeout_s=10, probe=probe, clock=lambda: now[0])
    assert not live.check_once()
    now[0] += 11
    problem = live.problem()
    assert problem is not None
    assert problem.endswith("last error: [Error 7] RequestTimedOutError: Request timed out")
    assert problem.count("RequestTimedOutError") == 1
