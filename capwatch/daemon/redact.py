"""What a configuration error or a log line may show of a value: everything but secrets.

A key is secret by what it names, not by a word anywhere in it: its last word (split at
``_``, ``-``, ``.`` and camelCase) is a password, token, secret, key, credential or an
authorization/cookie header (``key_password``, ``bearer_token``, ``client_secret``,
``secret_key``, ``api-key``, ``Authorization``). ``secretMounts`` (Secret names to mount),
``password_file`` or ``ssl_keyfile`` (paths) and ``dedup_key`` are not secrets and stay
readable; a value is hidden only where it is one. A URL's password
(``postgresql://capwatch:***@db/capwatch``) is hidden wherever it appears.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

HIDDEN = "***"

_SECRET_LAST_WORDS = frozenset({
    "password", "passwd", "passphrase", "pwd", "token", "secret", "key", "apikey",
    "credential", "credentials", "authorization", "cookie",
})
"""What a secret's key ends with (not "auth": ``http.read_auth`` is a switch)."""

_NOT_SECRET_KEYS = frozenset({"dedup_key", "group_key", "key_field", "partition_key"})
"""Keys ending in "key" that name a field, not key material."""

_WORDS = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")


def _words(key: str) -> list[str]:
    return [w.lower() for w in _WORDS.findall(key)]


def is_secret_key(key: object) -> bool:
    """True for a key whose value is a secret (see the module's docstring)."""
    if not isinstance(key, str) or key.lower() in _NOT_SECRET_KEYS:
        return False
    words = _words(key)
    return bool(words) and words[-1] in _SECRET_LAST_WORDS


def redact_url(url: str) -> str:
    """A URL as logs and errors may show it: its password hidden."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:  # not a URL after all (a bad port, an odd bracket)
        return url
    if not password:
        return url
    netloc = parts.netloc.replace(f":{password}@", f":{HIDDEN}@", 1)
    return parts._replace(netloc=netloc).geturl()


def redacted(value: Any, key: object = None) -> Any:
    """``value`` (under ``key``) with every secret hidden, nested mappings and lists
    included."""
    if key is not None and is_secret_key(key):
        return HIDDEN
    if isinstance(value, dict):
        return {k: redacted(v, k) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(redacted(v) for v in value)
    if isinstance(value, str) and "@" in value and "://" in value:
        return redact_url(value)
    return value
