"""``capwatch run --config FILE``: the long-running daemon."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from capwatch.console.terminal import echo
from capwatch.daemon.config import ConfigError, DaemonConfig, load_config
from capwatch.model.errors import ModelError

if TYPE_CHECKING:
    from capwatch.model.domain import Domain, Problem


def register(sub: Any) -> None:
    run = sub.add_parser(
        "run", help="run the monitoring daemon",
        description="Consume agent traces, keep each agent's capability model up to date, "
                    "publish model versions and alerts. Stops cleanly on SIGTERM/SIGINT.")
    run.add_argument("--config", required=True, help="YAML configuration file "
                     "(CAPWATCH_* environment variables override it, see docs/daemon.md)")
    run.add_argument("--check", action="store_true",
                     help="validate the configuration (agent URL templates included) and the "
                          "family models, then exit")
    run.add_argument("--connect", action="store_true",
                     help="with --check: also open the store and connect to Kafka (with "
                          "its security settings), then exit")
    run.add_argument("--exit-when-idle", action="store_true",
                     help="exit once a finite source (JSONL file, simulation) is exhausted and "
                          "every queued assessment is done")
    run.set_defaults(handler=handle)


def _check(config: DaemonConfig, path: str, connect: bool) -> int:
    """Warnings for what is valid but surely unintended; ``connect``: try the servers."""
    warnings = []
    if not config.families:
        warnings.append("families is empty: every transition will be dead-lettered as of "
                        "an unknown family")
    source = config.source
    if source.kind == "jsonl":
        if source.path == "-":
            # Valid for a pipe, but a config that merely forgot the path would sit waiting
            # on a terminal (or on /dev/null under a service manager) and look hung.
            echo(f"{path}: note: source.path is not set: transitions are read from "
                  "standard input", file=sys.stderr)
        elif not source.follow and not Path(source.path).is_file():
            warnings.append(f"source.path {source.path!r} is not a file")
    for w in warnings:
        echo(f"{path}: warning: {w}", file=sys.stderr)
    try:
        # Secret files are read now, not at the first agent query.
        config.agents.request_headers()
        config.http.api_token()
        if config.agents.tls is not None:
            config.agents.tls.context()
        if config.kafka.tls is not None and config.kafka.security_protocol.endswith("SSL"):
            config.kafka.tls.context()
        config.kafka.client_options()
        if config.source.kind == "kafka" or config.output.kind == "kafka":
            from capwatch.daemon.service import kafka_clients

            kafka_clients(config.kafka)
    except ConfigError as e:
        echo(f"capwatch run: {e}", file=sys.stderr)
        return 2
    if connect:
        from capwatch.daemon.redact import redact_url
        from capwatch.daemon.service import DependencyError, wait_for_kafka
        from capwatch.models_store import open_store

        try:
            open_store(config.store.url).close()
            echo(f"store: {redact_url(config.store.url)}: reachable")
        except Exception as e:
            echo(f"capwatch run: store: {type(e).__name__}: {e}", file=sys.stderr)
            return 1
        if config.source.kind == "kafka" or config.output.kind == "kafka":
            k = config.kafka.model_copy(update={"connect_timeout_s": min(
                config.kafka.connect_timeout_s, 15.0)})
            try:
                wait_for_kafka(k)
            except DependencyError as e:
                echo(f"capwatch run: {e}", file=sys.stderr)
                return 1
            echo(f"Kafka: {k.bootstrap_servers} ({k.security_protocol}): reachable")
    echo(f"{path}: configuration is valid" + (" with warnings" if warnings else ""))
    return 0


def _families(config: DaemonConfig, path: str
              ) -> tuple[dict[str, Domain], dict[str, Problem]] | int:
    """The configured family models, or 2 after saying on stderr why one cannot be read."""
    from capwatch.daemon.service import load_families

    try:
        return load_families(config)
    except ConfigError as e:
        echo(f"capwatch run: {e}", file=sys.stderr)
    except (ModelError, OSError) as e:
        echo(f"capwatch run: {path}: family model: {e}", file=sys.stderr)
    return 2


def handle(args: argparse.Namespace) -> int:
    from capwatch.daemon.logs import configure_logging

    if args.connect and not args.check:
        echo("capwatch run: --connect goes with --check", file=sys.stderr)
        return 2
    try:
        config = load_config(args.config)
    except ConfigError as e:
        echo(f"capwatch run: {e}", file=sys.stderr)
        return 2
    if args.check:
        if isinstance(_families(config, args.config), int):
            return 2
        if args.connect:
            configure_logging(config.log.level, config.log.format,
                      kafka_client=config.kafka.client)
        return _check(config, args.config, args.connect)
    configure_logging(config.log.level, config.log.format,
                      kafka_client=config.kafka.client)
    # The probes first: the rest of the daemon (the monitor, SciPy, the assessment engine,
    # ~1.2 s of CPU in pure Python) is imported while /healthz already answers and /readyz
    # says what the daemon is doing (capwatch.daemon.startup).
    from capwatch.daemon.startup import start_early

    try:
        early = start_early(config)
    except (ConfigError, OSError) as e:
        # A port in use, an unreadable token file.
        echo(f"capwatch run: {e}", file=sys.stderr)
        return 1
    try:
        early.startup.doing = "loading capwatch's modules"
        from capwatch.daemon.heap import settle_heap
        from capwatch.daemon.service import DependencyError, build_service

        early.startup.doing = "reading the family models"
        families = _families(config, args.config)
        if isinstance(families, int):
            return 2
        try:
            service = build_service(config, early=early, families=families)
            early.api = None  # the service's now: it stops the server when it stops
            settle_heap()
            return service.run(exit_when_idle=args.exit_when_idle)
        except (ConfigError, DependencyError) as e:
            echo(f"capwatch run: {e}", file=sys.stderr)
            return 1
        except OSError as e:
            # A missing input file, an unwritable store directory.
            echo(f"capwatch run: {e}", file=sys.stderr)
            return 1
        except Exception as e:
            from kafka.errors import KafkaError

            errors: tuple[type[Exception], ...] = (KafkaError,)
            if config.kafka.client == "confluent-kafka":
                from confluent_kafka import KafkaException

                errors += (KafkaException,)
            if isinstance(e, errors):
                echo(f"capwatch run: Kafka at {config.kafka.bootstrap_servers}: {e}",
                      file=sys.stderr)
                return 1
            raise
    finally:
        early.close()
