"""Configuration errors show what was given, except secrets (capwatch/daemon/redact.py):
hidden by what the key names (a password, token, secret, key, credential, authorization),
not by a word somewhere in it, so ``secretMounts`` or ``password_file`` stay readable."""

from __future__ import annotations

import pytest

from capwatch.daemon.config import ConfigError, load_config
from capwatch.daemon.redact import is_secret_key, redacted


@pytest.mark.parametrize("key", [
    "password", "key_password", "sasl_plain_password", "ssl_password", "token",
    "bearer_token", "api_token", "client_secret", "secret", "secret_key", "api_key",
    "X-Api-Key", "private_key", "accessKey", "Authorization", "Proxy-Authorization",
    "Cookie", "credentials", "passphrase",
])
def test_keys_that_hold_secrets(key: str) -> None:
    assert is_secret_key(key)


@pytest.mark.parametrize("key", [
    "secretMounts", "secret_mounts", "password_file", "token_file", "bearer_token_file",
    "ssl_keyfile", "key_file", "secretName", "dedup_key", "read_auth", "tokens_per_s",
    "keys", "X-Trace-Id", "url", 3,
])
def test_keys_that_do_not(key: object) -> None:
    assert not is_secret_key(key)


def test_nested_secrets_are_hidden_in_mappings_and_lists_and_urls() -> None:
    given = {"secretMounts": [{"name": "kafka-tls", "secretName": "capwatch-kafka-tls"}],
             "webhooks": [{"url": "https://h/x", "token": "t0p"}],
             "headers": {"Authorization": "Bearer abc", "X-Trace": "1"},
             "store": "postgresql://cw:hunter2@db/cw"}
    assert redacted(given) == {
        "secretMounts": [{"name": "kafka-tls", "secretName": "capwatch-kafka-tls"}],
        "webhooks": [{"url": "https://h/x", "token": "***"}],
        "headers": {"Authorization": "***", "X-Trace": "1"},
        "store": "postgresql://cw:***@db/cw"}


def _error(text: str) -> str:
    with pytest.raises(ConfigError) as e:
        load_config(text=text)
    return str(e.value)


def test_a_config_error_shows_what_is_not_secret() -> None:
    """An operator who pasted the Helm chart's values into the daemon's file must see them."""
    error = _error("secretMounts: [{name: kafka-tls, secretName: capwatch-kafka-tls}]\n")
    assert "secretMounts" in error and "capwatch-kafka-tls" in error
    error = _error("kafka: {sasl: {mechanism: PLAIN, username: u, password_file: 7}, "
                   "security_protocol: SASL_SSL}\n")
    assert "7" in error


def test_a_config_error_hides_secrets() -> None:
    error = _error("http: {token: [hunter2]}\n")
    assert "hunter2" not in error and "***" in error
    error = _error("agents: [{headers: {Authorization: 'Bearer s3cr3t', X-Trace: on}}]\n"
                   "database: 'postgresql://cw:hunter2@db/cw'\n")
    assert "X-Trace" in error and "postgresql://cw:***@db/cw" in error, error
    assert "s3cr3t" not in error and "hunter2" not in error
    error = _error("kafka: {sasl: {mechanism: PLAIN, username: u, password: s3cr3t, "
                   "extra: 1}, security_protocol: SASL_SSL}\n")
    assert "s3cr3t" not in error
