"""Configuration: defaults, file + environment, and errors that say where."""

from __future__ import annotations

from pathlib import Path

import pytest

from capwatch.daemon.config import ConfigError, load_config
from tests.paths import REPO_ROOT


def test_defaults_need_no_file() -> None:
    cfg = load_config(text="")
    assert cfg.source.kind == "kafka"
    assert cfg.kafka.transitions_topic == "capwatch.transitions"
    assert cfg.assessment.method == "verify"


def test_the_demo_configuration_is_valid_and_resolves_paths_next_to_it() -> None:
    cfg = load_config(REPO_ROOT / "capwatch" / "examples" / "demo.yaml")
    assert cfg.source.kind == "simulated"
    assert cfg.families["rover-v3"].domain == REPO_ROOT / "capwatch" / "examples" / "rover.pddl"
    assert cfg.source.simulated.drifts[0].domain.is_file()


def test_errors_name_file_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "capwatch.yaml"
    path.write_text("kafka:\n  group_id: g\n  max_poll_records: -4\n"
                    "detection:\n  debounce_transitions: x\n  bogus: 1\n")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    text = str(e.value)
    assert f"{path}:3:3: kafka.max_poll_records: Input should be greater than or equal to 1" \
        in text
    assert f"{path}:5:3: detection.debounce_transitions" in text
    assert f"{path}:6:3: detection.bogus: Extra inputs are not permitted" in text


def test_a_long_bad_value_is_shown_cut_with_an_ellipsis(tmp_path: Path) -> None:
    # Helm values handed to capwatch run: the whole `config:` mapping is the bad value.
    path = tmp_path / "values.yaml"
    path.write_text("config:\n  kafka:\n    bootstrap_servers: kafka.kafka:9093\n"
                    "    security_protocol: SASL_SSL\n  http: {host: 0.0.0.0}\n"
                    "short: 1\n")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    lines = {line.split(": ")[1]: line for line in str(e.value).splitlines()[1:]}
    long_line = lines["config"]
    assert long_line.endswith("…)") and "'bootstrap_servers'" in long_line
    assert long_line.count("…") == 1 and len(long_line.split("(got ")[1]) == 81
    assert lines["short"].endswith("(got 1)")


def test_yaml_syntax_errors_point_at_the_spot(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("kafka:\n  group_id: [unclosed\n")
    with pytest.raises(ConfigError, match=rf"{path}:\d+:\d+: not valid YAML"):
        load_config(path)
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_config(text="- a\n- b\n")
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")


def test_environment_overrides_the_file_and_its_errors_name_the_variable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAPWATCH_KAFKA__GROUP_ID", "from-env")
    cfg = load_config(text="kafka:\n  group_id: from-file\n  client_id: kept\n")
    assert cfg.kafka.group_id == "from-env"
    assert cfg.kafka.client_id == "kept"
    monkeypatch.setenv("CAPWATCH_KAFKA__PARTITIONS", "many")
    with pytest.raises(ConfigError) as e:
        load_config(text="")
    assert "environment variable CAPWATCH_KAFKA__PARTITIONS: kafka.partitions" in str(e.value)


def test_a_variable_naming_no_section_is_an_error_not_ignored(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A misspelt field of a known section is refused (extra="forbid"), but pydantic-settings
    # drops a variable whose section is unknown: CAPWATCH_KAFAK__BOOTSTRAP_SERVERS left the
    # daemon on its default broker without a word.
    monkeypatch.setenv("CAPWATCH_PURE_PYTHON", "1")  # not configuration: no "__"
    assert load_config(text="").kafka.bootstrap_servers == "127.0.0.1:9092"
    monkeypatch.setenv("CAPWATCH_KAFAK__BOOTSTRAP_SERVERS", "kafka:9092")
    with pytest.raises(ConfigError) as e:
        load_config(text="")
    assert ("environment variable CAPWATCH_KAFAK__BOOTSTRAP_SERVERS: no configuration"
            " section 'kafak'") in str(e.value)
    monkeypatch.delenv("CAPWATCH_KAFAK__BOOTSTRAP_SERVERS")
    monkeypatch.setenv("capwatch_store__url", "x.db")  # names are not case-sensitive
    assert str(load_config(text="").store.url) == "x.db"


def test_cross_checks_catch_a_simulated_family_without_a_model() -> None:
    with pytest.raises(ConfigError, match="names 'ghost', which is not in families"):
        load_config(text="source:\n  kind: simulated\n  simulated:\n"
                         "    families: {ghost: {agents: 2}}\n")
    with pytest.raises(ConfigError, match="exactly one of agent_id or family"):
        load_config(text="source:\n  simulated:\n    drifts:\n"
                         "      - {domain: x.pddl, at_step: 3}\n")


def test_fetch_sizes_a_kafka_client_would_refuse_are_configuration_errors() -> None:
    # librdkafka refuses a partition fetch over 1e9 bytes only when the consumer is made,
    # after the daemon has started; the configuration says so at load, naming the key.
    with pytest.raises(ConfigError, match=r"kafka\.partition_fetch_bytes"):
        load_config(text="kafka:\n  partition_fetch_bytes: 2000000000\n")
    with pytest.raises(ConfigError, match=r"limits\.max_message_bytes must be at most"):
        load_config(text="limits:\n  max_message_bytes: 999999999\n")
    assert load_config(text="limits:\n  max_message_bytes: 999934464\n"
                       ).limits.max_message_bytes == 999_934_464


@pytest.mark.parametrize("config_text", ["", None])
def test_relative_store_urls_land_in_the_working_directory(
        config_text: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # "sqlite:///name.db" means /name.db (sqlite:// + path); a default or example written
    # that way put the store at the file system's root instead of next to the operator.
    from capwatch.models_store import open_store

    monkeypatch.chdir(tmp_path)
    cfg = (load_config(text=config_text) if config_text is not None
           else load_config(REPO_ROOT / "capwatch" / "examples" / "demo.yaml"))
    store = open_store(cfg.store.url)
    store.close()
    created = sorted(p.name for p in tmp_path.iterdir())
    assert created and created[0] in ("capwatch.db", "capwatch-demo.db"), created


def test_a_key_given_twice_in_one_mapping_is_refused_with_both_lines(tmp_path: Path) -> None:
    # YAML loaders keep the last of two equal keys: a second `store:` section (or a
    # second `kafka:` pasted below the first) silently replaced the first one's settings.
    path = tmp_path / "c.yaml"
    path.write_text("store: {url: a.db}\nhttp: {enabled: false}\n"
                    "kafka:\n  group_id: one\n  group_id: two\nstore: {url: b.db}\n")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    text = str(e.value)
    assert f"{path}:6:1: store: given twice (first at line 1)" in text
    assert f"{path}:5:3: kafka.group_id: given twice (first at line 4)" in text


def test_a_store_url_of_an_unsupported_scheme_is_a_configuration_error() -> None:
    # It used to pass `run --check` and fail only when the daemon opened the store.
    with pytest.raises(ConfigError, match=r"store\.url: .*postgresql:// \(got 'mysql://db/capwatch'\)"):
        load_config(text="store: {url: 'mysql://db/capwatch'}\n")
    for ok in ("capwatch.db", "sqlite:///var/lib/x.db", "postgresql://u@h/db",
               "postgres://u@h/db", ":memory:"):
        assert load_config(text=f"store: {{url: '{ok}'}}\n").store.url == ok
