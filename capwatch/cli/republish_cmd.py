"""``capwatch models republish``: publish each agent's newest stored model version again.

The models topic is where consumers read an agent's model; the store keeps every version.
A topic deleted (by mistake, or recreated to change its partitions) loses the versions on
it, and capwatch publishes a version only when it learns one: an agent that does not drift
again would have no model on the topic for good (faults15). This puts each agent's newest
version back, through the daemon's own publisher and settings (``--config``), keyed and
formatted as the daemon publishes it. Sending a version already on the topic again is
harmless: the same version number and content, and compaction keeps one.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from capwatch.console.terminal import echo
from capwatch.contracts.errors import error_text

ROUNDS = 5
"""Rounds of publishing the newest versions, each read again after the last round's flush:
a daemon storing a newer version while this runs publishes it itself, possibly before this
command's older one. A read after the last round that finds nothing newer is success (it
was failure before session 17 when the fifth round had published something)."""


def register_republish(msub: Any) -> None:
    p = msub.add_parser(
        "republish", help="publish each agent's newest stored version to the models topic "
                          "again (after the topic lost them)")
    p.add_argument("--config", required=True,
                   help="the daemon's configuration (its store and Kafka settings)")
    p.add_argument("--family", help="only this family's agents")
    p.add_argument("--agent", help="only this agent (its id)")
    p.set_defaults(handler=_republish)


def _republish(args: argparse.Namespace) -> int:
    from capwatch.daemon.config import ConfigError, load_config
    from capwatch.daemon.events import model_event, resend_newest_versions
    from capwatch.daemon.service import kafka_clients
    from capwatch.models_store import ModelRef, open_store

    try:
        config = load_config(args.config)
        if config.output.kind != "kafka":
            raise ConfigError(f"{args.config}: output.kind is {config.output.kind!r}: "
                              "republish writes to Kafka's models topic")
        k = config.kafka
        _, publisher_class = kafka_clients(k)
    except ConfigError as e:
        echo(f"capwatch: {e}", file=sys.stderr)
        return 2
    try:
        store = open_store(config.store.url, migrate=False)
    except Exception as e:  # psycopg's connection errors have no common stdlib base
        echo(f"capwatch: cannot open model store: {error_text(e)}", file=sys.stderr)
        return 1
    publisher = publisher_class(k.bootstrap_servers, models_topic=k.models_topic,
                                alerts_topic=k.alerts_topic,
                                dead_letter_topic=k.dead_letter_topic,
                                client_id=f"{k.client_id}-republish",
                                security=k.client_options())
    # As the daemon's publisher: a version sent again (a refused one, at a failed run's
    # last flush too) goes out as the agent's newest, never behind a daemon's newer one.
    resend_newest_versions(publisher, store)
    try:
        sent: dict[tuple[str, str], int] = {}
        for round_ in range(ROUNDS + 1):
            newest = {(r.family, r.agent_id): r.version for r in store.newest_versions()
                      if r.agent_id is not None and args.family in (None, r.family)
                      and args.agent in (None, r.agent_id)}
            todo = {key: n for key, n in newest.items() if sent.get(key) != n}
            if not todo:
                break
            if round_ == ROUNDS:
                echo("capwatch: newer versions kept arriving; run it again",
                      file=sys.stderr)
                return 1
            for (family, agent_id), n in sorted(todo.items()):
                version = store.get(ModelRef(family, agent_id, n))
                if version is not None:
                    publisher.model_version(model_event(version))
            publisher.flush(30)
            sent.update(todo)
            for (family, agent_id), n in sorted(todo.items()):
                echo(f"published {family}/{agent_id}@{n}")
    except Exception as e:  # a broker or store error: nothing is lost, run it again
        echo(f"capwatch: republish failed: {error_text(e)}", file=sys.stderr)
        return 1
    finally:
        publisher.close()
        store.close()
    if not sent:
        echo("no agent version to publish")
    return 0
