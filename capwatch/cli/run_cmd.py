"""``capwatch run --config FILE``: the long-running daemon."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from capwatch.daemon.config import ConfigError, load_config
from capwatch.model.errors import ModelError


def register(sub: Any) -> None:
    run = sub.add_parser(
        "run", help="run the monitoring daemon",
        description="Consume agent traces, keep each agent's capability model up to date, "
                    "publish model versions and alerts. Stops cleanly on SIGTERM/SIGINT.")
    run.add_argument("--config", required=True, help="YAML configuration file "
                     "(CAPWATCH_* environment variables override it, see docs/daemon.md)")
    run.add_argument("--check", action="store_true",
                     help="validate the configuration and the family models, then exit")
    run.add_argument("--exit-when-idle", action="store_true",
                     help="exit once a finite source (JSONL file, simulation) is exhausted and "
                          "every queued assessment is done")
    run.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from capwatch.daemon.logs import configure_logging
    from capwatch.daemon.service import build_service, load_families

    try:
        config = load_config(args.config)
        load_families(config)
    except ConfigError as e:
        print(f"capwatch run: {e}", file=sys.stderr)
        return 2
    except (ModelError, OSError) as e:
        print(f"capwatch run: {args.config}: family model: {e}", file=sys.stderr)
        return 2
    if args.check:
        print(f"{args.config}: configuration is valid")
        return 0
    configure_logging(config.log.level, config.log.format)
    try:
        service = build_service(config)
        return service.run(exit_when_idle=args.exit_when_idle)
    except OSError as e:
        # A missing input file, an unwritable store directory, a port in use.
        print(f"capwatch run: {e}", file=sys.stderr)
        return 1
    except Exception as e:
        from kafka.errors import KafkaError

        if isinstance(e, KafkaError):
            print(f"capwatch run: Kafka at {config.kafka.bootstrap_servers}: {e}",
                  file=sys.stderr)
            return 1
        raise
