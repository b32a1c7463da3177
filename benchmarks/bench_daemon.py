"""Pipeline throughput on one process: decode alone, and the whole pipeline (no servers).

- decode: wire bytes → validated transitions (pydantic-core), per message;
- pipeline: the simulated fleet's bytes through decode, vocabulary check, the per-agent
  monitor, drift detectors and checkpoints, with a SQLite store and an in-memory
  publisher, no drift (so no assessment): the steady-state cost per transition.

Both figures are CPU time per message, so other load on the machine does not skew them.
Fleet: 2 example families (rover, PPDDL courier) × 50 agents.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from capwatch.adapters.io.streams import MemoryPublisher
from capwatch.adapters.sim.fleet import FamilySpec, SimulatedFleet
from capwatch.contracts.ports import Record
from capwatch.contracts.wire import DeadLetter
from capwatch.contracts.wire_fast import decode
from capwatch.daemon.config import DaemonConfig
from capwatch.daemon.logs import configure_logging
from capwatch.daemon.service import FleetDirectory, build_service
from capwatch.model.pddl_reader import read_domain, read_problem

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "capwatch" / "examples"
AGENTS_PER_FAMILY = 50
ROUNDS = 200


def fleet() -> SimulatedFleet:
    families = {
        "rover-v1": FamilySpec("rover-v1", read_domain(EXAMPLES / "rover.pddl"),
                               read_problem(EXAMPLES / "rover-problem.pddl")),
        "courier-v1": FamilySpec("courier-v1", read_domain(EXAMPLES / "courier.pddl"),
                                 read_problem(EXAMPLES / "courier-problem.pddl")),
    }
    return SimulatedFleet.build(families, AGENTS_PER_FAMILY, seed=1)


class Replay:
    """A pre-generated stream, so the fleet simulation is not part of the measurement."""

    name = "bench"

    def __init__(self, records: list[Record]) -> None:
        self.records = records
        self.pos = 0

    def start(self, on_assign: object, on_revoke: object, resume: object) -> None:
        del on_revoke, resume
        on_assign({0})  # type: ignore[operator]

    def poll(self, timeout_s: float) -> list[Record]:
        batch = self.records[self.pos:self.pos + 500]
        self.pos += len(batch)
        return batch

    def commit(self, offsets: object) -> None:
        """Progress is the store's checkpoint."""

    def exhausted(self) -> bool:
        return self.pos >= len(self.records)

    def lag(self) -> dict[int, int]:
        return {}

    def close(self) -> None:
        """Nothing to release."""


def main() -> int:
    configure_logging("error", "json")
    f = fleet()
    events = list(f.events(ROUNDS))
    raw = [e.value for e in events]
    t0 = time.process_time()
    for r in raw:
        result = decode(r)
        assert not isinstance(result, DeadLetter)
    decode_s = (time.process_time() - t0) / len(raw)

    records = [Record("bench", 0, i, e.agent_id.encode(), e.value)
               for i, e in enumerate(events)]
    with tempfile.TemporaryDirectory() as tmp:
        cfg = DaemonConfig(**{
            "replica_id": "bench", "store": {"url": f"sqlite:///{Path(tmp) / 'm.db'}"},
            "families": {"rover-v1": {"domain": str(EXAMPLES / "rover.pddl")},
                         "courier-v1": {"domain": str(EXAMPLES / "courier.pddl")}},
            "output": {"kind": "log"}, "http": {"enabled": False},
        })
        source = Replay(records)
        service = build_service(cfg, publisher=MemoryPublisher(), source=source,
                                agents=FleetDirectory(f))
        t0 = time.process_time()
        w0 = time.perf_counter()
        service.run(exit_when_idle=True, install_signals=False)
        pipeline_s = (time.process_time() - t0) / len(records)
        wall = time.perf_counter() - w0
        processed = service.pipeline.processed
    assert processed == len(records)
    print(f"daemon benchmark: {len(records)} transitions of {2 * AGENTS_PER_FAMILY} agents "
          f"(rover + PPDDL courier), no drift")
    print(f"  decode only       {decode_s * 1e6:8.1f} us CPU/message "
          f"({1 / decode_s:10,.0f} messages/s)")
    print(f"  whole pipeline    {pipeline_s * 1e6:8.1f} us CPU/transition "
          f"({1 / pipeline_s:10,.0f} transitions/s; wall {wall:.2f}s incl. start and stop)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
