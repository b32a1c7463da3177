"""The results poll reads the live queue (pending and claimed work) as one snapshot: work
given back for a retry (claimed -> pending) between two reads was in neither, so the
poll took it for ended and released the agent awaiting it, which then queued the same
evidence again beside the retried work. Through the pipeline and the store; no servers."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from tests.daemon.helpers import refused_sample
from tests.daemon.test_awaiting_after_restart import _start


def test_work_given_back_while_the_poll_reads_the_queue_is_still_awaited(
        tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_text(refused_sample(step=0) + "\n")
    d = _start(tmp_path, path)
    try:
        d.handle_batch(d.source.poll(1.0))
        d.sweep(force=True)
        watch = d.registry.get("rover-a")
        assert watch is not None and watch.awaiting is not None
        key = watch.awaiting
        (claimed,) = d.store.claim("other/w0", d.clock(), 60.0, 1)
        assert claimed.key == key
        store: Any = d.store
        reads = {"n": 0}

        def after_first_read(read: Any) -> Any:
            def wrapped(*args: Any, **kwargs: Any) -> Any:
                out = read(*args, **kwargs)
                reads["n"] += 1
                if reads["n"] == 1:
                    # The other replica's worker fails and gives the work back for a
                    # retry right after the poll's first read of the queue.
                    store.release(key, "other/w0", "agent unreachable",
                                  d.clock() + timedelta(seconds=5))
                return out
            return wrapped

        for name in ("queue_items", "live_queue_items"):
            if hasattr(store, name):
                setattr(store, name, after_first_read(getattr(store, name)))
        d.poll_results()
        assert reads["n"] >= 1
        assert [i.key for i in d.store.queue_items("pending")] == [key]
        assert watch.awaiting == key  # the work is still queued: still awaited
    finally:
        d.source.close()
        d.store.close()
