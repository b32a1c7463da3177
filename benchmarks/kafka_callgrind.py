"""bench_kafka's one-process kafka-python rows counted in instructions, not wall time
(docs/performance.md, "kafka-python in one process by instructions: session 20").

A topic on a real broker (``--bootstrap``; ``--fill`` writes a fleet's first
``--records`` records to it first, 3 partitions), then one reader of the whole topic with
callgrind's instrumentation switched on from its first record to its last::

    .venv/bin/python benchmarks/kafka_callgrind.py --fill --fleet DIR --records N \\
        --bootstrap HOST:PORT --topic T
    PYTHONHASHSEED=0 valgrind --tool=callgrind --instr-atstart=no \\
        .venv/bin/python benchmarks/kafka_callgrind.py --fleet DIR --records N \\
        --bootstrap HOST:PORT --topic T --reader run

``--reader``: ``bare`` (a kafka-python consumer with the client's defaults that
``json.loads`` each value: bench_kafka's bare row), ``source`` (capwatch's KafkaSource,
poll into Records, nothing after it), ``run`` (``capwatch run``'s service, its main loop
in a thread, as bench_kafka's ``capwatch_run``), ``alone`` (the records first read by the
source, uncounted, then a fresh daemon's main-loop turns over those batches: the
pipeline's part of ``run``). Every thread of the process is counted (the client's IO
thread, the daemon's workers): what a one-process ratio pays. Run ``bare`` and ``run``
(and the parts) alike, interleaved with the load, and compare instructions a record.
Without valgrind the toggles are skipped and the CPU seconds are printed.

Checkpoints and the idle sweeps keep the daemon's defaults: under callgrind a run is ~50
times slower, so more of them fall in the counted span than in a real run's; their
share is read from the function counts (``Pipeline.checkpoint``), not assumed away.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import fleets
from admission_callgrind import _instrument
from bench_fleet import NoAgents
from bench_kafka import Progress, daemon_config, fill
from kafka_split import pipeline_alone, read_batches

from capwatch.daemon.logs import configure_logging
from capwatch.daemon.service import build_service


def bare(bootstrap: str, topic: str, n: int) -> None:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap,
                             group_id=f"bare-{uuid.uuid4().hex[:6]}",
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             max_poll_records=500)
    seen = 0
    while seen < n:
        for records in consumer.poll(500).values():
            if not seen and records:
                _instrument(True)
            for r in records:
                json.loads(r.value)
            seen += len(records)
    _instrument(False)
    consumer.close()


def source(bootstrap: str, topic: str, n: int, isolation: str | None = None) -> None:
    from capwatch.adapters.io.kafka import KafkaSource

    options: dict[str, Any] = {} if isolation is None else {"isolation_level": isolation}
    s = KafkaSource(bootstrap, topic, f"src-{uuid.uuid4().hex[:6]}", **options)
    s.start(lambda parts: None, lambda parts: None, {})
    seen = 0
    while seen < n:
        records = s.poll(0.5)
        if not seen and records:
            _instrument(True)
        seen += len(records)
    _instrument(False)
    s.close()


def run(bootstrap: str, topic: str, n: int, families: dict[str, Path]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        svc = build_service(daemon_config(bootstrap, topic, Path(tmp) / "m.db",
                                          "kafka-python", families), agents=NoAgents())
        p = svc.pipeline
        # Switched on and off by the main loop itself, after the batch that got there
        # (bench_kafka's Progress): a thread of the benchmark's that looked every 10 ms
        # took the GIL from the main loop at each wake, ~50 times as many wakes a record
        # under callgrind as in a real run.
        progress = Progress(p, n, _instrument)
        runner = threading.Thread(target=svc.run, kwargs={"install_signals": False})
        runner.start()
        progress.wait(runner)
        p.stop()
        runner.join(600)


def alone(bootstrap: str, topic: str, n: int, families: dict[str, Path]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        config = daemon_config(bootstrap, topic, Path(tmp) / "m.db", "kafka-python",
                               families)
        batches = read_batches(config, n)
        _instrument(True)
        pipeline_alone(config, NoAgents(), batches)
        _instrument(False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fleet", type=Path, required=True)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--fill", action="store_true")
    parser.add_argument("--reader", choices=("bare", "source", "run", "alone"))
    parser.add_argument("--isolation", choices=("read_committed", "read_uncommitted"),
                        help="the source's kafka.isolation_level (--reader source; "
                             "unset: the source's default)")
    args = parser.parse_args()
    configure_logging("error", "json")
    fleet = fleets.load(args.fleet)
    n = min(args.records, len(fleet.events))
    if args.fill:
        from capwatch.adapters.io.kafka import ensure_topics

        t = args.topic
        ensure_topics(args.bootstrap, transitions=t, models=f"{t}-m", alerts=f"{t}-a",
                      dead_letter=f"{t}-d", partitions=3)
        print(fill(args.bootstrap, t, zip((a.encode() for a in fleet.agent_ids[:n]),
                                          fleet.events[:n], strict=True)))
    if args.reader is None:
        return 0
    cpu = time.process_time()
    if args.reader == "bare":
        bare(args.bootstrap, args.topic, n)
    elif args.reader == "source":
        source(args.bootstrap, args.topic, n, args.isolation)
    elif args.reader == "run":
        run(args.bootstrap, args.topic, n, fleet.families)
    else:
        alone(args.bootstrap, args.topic, n, fleet.families)
    print(f"{args.reader}: {n} records, {time.process_time() - cpu:.2f} s CPU (whole "
          f"process), load {os.getloadavg()[0]:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
