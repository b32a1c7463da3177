"""The daemon's HTTP ingest endpoint: transition events over HTTP for teams without Kafka.

``POST /ingest/v1/transitions`` with ``Authorization: Bearer <token>`` and a body of
wire-format inbound events (capwatch.contracts.wire), one JSON object per line
(``Content-Type: application/x-ndjson``) or a JSON array (``application/json``).
A batch is accepted whole or refused whole. docs/integrating-an-agent.md describes the
guarantee given by a 200.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

INGEST_PATH = "/ingest/v1/transitions"
OTLP_TRACES_PATH = "/v1/traces"
NDJSON = "application/x-ndjson"
DEFAULT_MAX_INGEST_BYTES = 16 * 1024 * 1024
MAX_INGEST_EVENTS = 10_000


class IngestResponse(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    accepted: int = Field(ge=0, description="Events durably stored by this request.")


class IngestRejection(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    line: int = Field(ge=0, description="0-based position of the event in the batch.")
    reason: str
