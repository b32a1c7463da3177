"""Topic end offsets for test assertions, asked with a bound and asked again.

kafka-python's ``end_offsets`` waits up to ``request_timeout_ms`` (305 s by default) for
an answer; on a loaded 2-core machine one such request was seen to hang for the whole
wait while the broker answered everyone else. A test then failed on a timeout of its own
harness, not of capwatch. Asking with a short bound, on a fresh connection, a few times,
tells a lost request apart from a broker that is really gone.
"""

from __future__ import annotations

from collections.abc import Sequence

from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaTimeoutError


def end_offsets(bootstrap: str, partitions: Sequence[TopicPartition], *,
                timeout_s: float = 20.0, attempts: int = 4) -> dict[TopicPartition, int]:
    """Each partition's end offset (the next offset to be written)."""
    last: Exception | None = None
    for _ in range(attempts):
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        try:
            ends = consumer.end_offsets(list(partitions), timeout_ms=int(timeout_s * 1000))
            return {tp: int(o) for tp, o in ends.items()}
        except KafkaTimeoutError as e:
            last = e
        finally:
            consumer.close()
    raise AssertionError(f"no end offsets from {bootstrap} in {attempts} attempts of "
                         f"{timeout_s:.0f} s: {last}")
