"""Reading a JSON request body within a limit, for the small HTTP servers on both sides
of the agent query protocol (the reference agent and the agent SDK's query server).

The limit is applied before anything is read, so an oversized or unbounded (chunked)
body never reaches memory; a refusal says whether the connection can still be reused.
"""

from __future__ import annotations

from http import HTTPStatus
from http.server import BaseHTTPRequestHandler


class BodyRefused(Exception):
    """The request body is not accepted; the server answers ``status`` with ``code``."""

    def __init__(self, status: HTTPStatus, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def read_json_body(handler: BaseHTTPRequestHandler, limit: int) -> bytes:
    """The body of a JSON request, at most ``limit`` bytes, or :class:`BodyRefused`.

    Every refusal that leaves unread bytes on the socket closes the connection, so the
    next request on it is never parsed from the middle of this one's body.
    """
    ctype = handler.headers.get("Content-Type", "application/json")
    if ctype.split(";", 1)[0].strip().lower() != "application/json":
        discard_body(handler, limit)
        raise BodyRefused(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type",
                          f"send Content-Type: application/json, not {ctype!r}")
    return read_sized_body(handler, limit)


def read_sized_body(handler: BaseHTTPRequestHandler, limit: int) -> bytes:
    """The body of a request of any type, sent with a ``Content-Length`` of at most
    ``limit`` bytes, or :class:`BodyRefused` (the connection then closes: its unread
    bytes would be parsed as the next request)."""
    if handler.headers.get("Transfer-Encoding"):
        handler.close_connection = True
        raise BodyRefused(HTTPStatus.LENGTH_REQUIRED, "length_required",
                          "chunked bodies are not accepted: send Content-Length")
    raw = handler.headers.get("Content-Length")
    if raw is None:
        handler.close_connection = True
        raise BodyRefused(HTTPStatus.LENGTH_REQUIRED, "length_required",
                          "Content-Length is required")
    try:
        length = int(raw)
        if length < 0:
            raise ValueError
    except ValueError:
        handler.close_connection = True
        raise BodyRefused(HTTPStatus.BAD_REQUEST, "invalid_length",
                          f"bad Content-Length {raw!r}") from None
    if length > limit:
        handler.close_connection = True
        raise BodyRefused(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "body_too_large",
                          f"body of {length} bytes exceeds the limit of {limit} bytes")
    data = handler.rfile.read(length)
    if len(data) < length:
        handler.close_connection = True
        raise BodyRefused(HTTPStatus.BAD_REQUEST, "truncated_body",
                          f"expected {length} body bytes, received {len(data)}")
    return data


def discard_body(handler: BaseHTTPRequestHandler, limit: int) -> None:
    """Read and drop a refused request's body so the connection stays usable, or mark
    the connection for closing when the body is too large or its length unknown."""
    try:
        length = int(handler.headers.get("Content-Length", "0"))
    except ValueError:
        length = -1
    if 0 <= length <= limit:
        handler.rfile.read(length)
    else:
        handler.close_connection = True
