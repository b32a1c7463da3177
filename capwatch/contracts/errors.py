"""How an error is named in a log line, a /readyz problem or a dead letter's reason:
``<class>: <message>``, the class named once. Here, below the adapters and the daemon,
so that both say it the same way."""

from __future__ import annotations


def error_text(error: BaseException) -> str:
    """``<class>: <message>``, the class named once: kafka-python's errors put their class
    name in their own text (first, or after an error code: ``[Error 7]
    RequestTimedOutError: ...``), which read "KafkaTimeoutError: KafkaTimeoutError: Unable
    to bootstrap ..."."""
    name, text = type(error).__name__, str(error)
    return text if name in text.split(":", 1)[0] else f"{name}: {text}"
