"""The first thing `capwatch run` does once its configuration is read: serve the probes.

The HTTP server (/healthz, /livez, /readyz, /metrics) is started before the rest of the
daemon is even imported, so a probe is answered within the cost of reading the
configuration and of this module's imports (~0.5 s of CPU, pure Python), not after the
monitor, the drift statistics (SciPy) and the assessment engine are loaded (~1.2 s more),
the store is open and the brokers answer. Until the daemon is built, /readyz answers 503
with ``starting: <what it is doing>``, and every other path but the probes and /metrics
503 ``starting``.

Only light modules are imported here: this module is what stands between a started
process and its first answer.
"""

from __future__ import annotations

from dataclasses import dataclass

import structlog

from capwatch.daemon.config import DaemonConfig
from capwatch.daemon.http import ApiServer, RecentAlerts
from capwatch.daemon.metrics import DaemonMetrics

log = structlog.get_logger("capwatch.service")


class Startup:
    """What the starting daemon is doing, for the log and /readyz."""

    def __init__(self) -> None:
        self.doing: str | None = "reading the configuration"

    def waiting_for(self, what: str) -> None:
        self.doing = f"waiting for {what}"

    def status(self) -> str | None:
        return self.doing


@dataclass
class EarlyStart:
    """What was made before the daemon itself: handed to ``build_service``."""

    startup: Startup
    metrics: DaemonMetrics
    recent: RecentAlerts
    api: ApiServer | None

    def close(self) -> None:
        """Stop the server if the daemon did not (a start that failed); idempotent."""
        api, self.api = self.api, None
        if api is not None and api.started:
            api.close()


def start_early(config: DaemonConfig) -> EarlyStart:
    """The probes' HTTP server, serving from now on (None with ``http.enabled: false``)."""
    startup, metrics, recent = Startup(), DaemonMetrics(), RecentAlerts()
    api = None
    if config.http.enabled:
        api = ApiServer(None, metrics.registry, ready=lambda: False,
                        families_of=lambda agent_id: None, alerts=recent,
                        host=config.http.host, port=config.http.port,
                        token=config.http.api_token(), read_auth=config.http.read_auth,
                        starting=startup.status).start()
        log.info("http listening", url=api.url)
    return EarlyStart(startup, metrics, recent, api)
