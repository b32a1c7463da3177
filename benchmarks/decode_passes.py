"""The fast decoder alone over a fleet's stream, each agent's memo kept as the intake
keeps it: for instruction counts (callgrind) of decode, A/B between two trees.

    valgrind --tool=callgrind --toggle-collect='CPyPy_wire_fast___decode' \\
        .venv/bin/python benchmarks/decode_passes.py --fleet DIR --messages 2000

``--fleet`` is a ``--fleet`` directory (benchmarks/fleets.py); without it, the default
fleet of bench_daemon.py (rover + courier, ``--agents`` a family). ``--passes`` (default
2): the first pass admits every atom and state, the second is the steady state. Prints
the CPU time of each pass (noisy at load: use the instruction counts for A/B).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from capwatch.contracts import wire_fast
from capwatch.contracts.wire import DeadLetter


def stream(args: argparse.Namespace) -> list[tuple[bytes, str]]:
    if args.fleet is not None:
        import fleets

        f = fleets.load(args.fleet)
        pairs = list(zip(f.events, f.agent_ids, strict=True))
    else:
        import bench_daemon

        sim = bench_daemon.fleet(args.agents)
        pairs = [(e.value, e.agent_id) for e in sim.events(args.messages // (2 * args.agents) + 1)]
    return pairs[:args.messages]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--fleet", type=Path)
    p.add_argument("--agents", type=int, default=100, help="default fleet: agents a family")
    p.add_argument("--messages", type=int, default=2000)
    p.add_argument("--passes", type=int, default=2)
    args = p.parse_args()
    pairs = stream(args)
    memos: dict[str, Any] = {}
    transitions = 0
    for n in range(args.passes):
        t0 = time.process_time()
        for raw, agent in pairs:
            memo: list[Any] = [memos.get(agent), None, None]
            out = wire_fast.decode(raw, memo=memo)
            if isinstance(out, DeadLetter):
                raise SystemExit(f"dead letter: {out.reason}")
            memos[agent] = memo[0]
            transitions += len(out) if n == 0 else 0
        s = time.process_time() - t0
        print(f"pass {n + 1}: {s / len(pairs) * 1e6:.1f} us CPU a message "
              f"({len(pairs)} messages, {transitions} transitions)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
