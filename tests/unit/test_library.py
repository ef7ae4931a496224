"""The library as a host service embeds it: its own metrics registry, the host's logging
left alone, configs built in code checked like files, and a curated public API."""

from __future__ import annotations

import importlib
import inspect
import logging
import pkgutil
from pathlib import Path

import prometheus_client
import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest

import syncer
from syncer import ClusterConfig, Config, ConfigError, CopierConfig, Syncer, TopicsConfig

PACKAGE = Path(syncer.__file__).parent


def in_code(**changes: object) -> Config:
    base: dict[str, object] = {
        "local": ClusterConfig("127.0.0.1:9"),
        "remotes": (ClusterConfig("127.0.0.1:10", name="east"),),
        "topics": TopicsConfig(include=("orders",)),
    }
    return Config(**{**base, **changes})  # type: ignore[arg-type]


def metric_names(registry: CollectorRegistry) -> set[str]:
    return {m.name for m in registry.collect()}


async def test_each_syncer_has_its_own_registry_and_two_do_not_clash() -> None:
    before = set(prometheus_client.REGISTRY._names_to_collectors)
    first, second = Syncer(in_code()), Syncer(in_code(name="second"))
    assert first.registry is not second.registry
    assert first.registry is not prometheus_client.REGISTRY
    assert "syncer_fetch_duration_seconds" in metric_names(first.registry)
    assert "syncer_partition_lag_records" in metric_names(second.registry)
    assert set(prometheus_client.REGISTRY._names_to_collectors) == before


async def test_a_host_registry_holds_the_syncers_metrics_beside_its_own() -> None:
    host = CollectorRegistry()
    requests = Counter("host_requests", "the host's own metric", registry=host)
    requests.inc()
    embedded = Syncer(in_code(), registry=host)
    assert embedded.registry is host
    page = generate_latest(host).decode()
    assert "host_requests_total 1.0" in page
    assert "syncer_produce_duration_seconds_count 0.0" in page
    assert "syncer_topics_refused 0.0" in page


async def test_the_global_registry_can_be_passed_without_a_snapshot_at_registration() -> None:
    # the global registry describes collectors as they register: ours must not collect then
    registry = CollectorRegistry(auto_describe=True)
    Syncer(in_code(), registry=registry)
    assert "syncer_remote_healthy" in metric_names(registry)


async def test_two_syncers_in_one_registry_clash_loudly() -> None:
    host = CollectorRegistry()
    Syncer(in_code(), registry=host)
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        Syncer(in_code(name="second"), registry=host)


async def test_a_config_built_in_code_is_checked_with_the_same_messages_as_a_file() -> None:
    raw = {
        "local": {"bootstrap_servers": ""},
        "remotes": [],
        "topics": {"include": ["orders"]},
        "copier": {"max_in_flight": 9},
    }
    with pytest.raises(ConfigError) as from_file:
        Config.from_dict(raw)
    built = in_code(local=ClusterConfig(""), remotes=(), copier=CopierConfig(max_in_flight=9))
    with pytest.raises(ConfigError) as from_code:
        Syncer(built)
    assert from_code.value.problems == from_file.value.problems
    assert len(from_code.value.problems) == 3
    assert "copier.max_in_flight: must be 1..5" in str(from_code.value)


def test_a_wrong_type_in_code_is_a_config_error_too() -> None:
    with pytest.raises(ConfigError, match=r"copier.max_in_flight: expected"):
        in_code(copier=CopierConfig(max_in_flight="many")).validate()  # type: ignore[arg-type]


async def test_a_valid_config_in_code_is_kept_as_built() -> None:
    token_provider = object()  # a python-only setting survives the check
    config = in_code(local=ClusterConfig("127.0.0.1:9", sasl_oauth_token_provider=token_provider))
    checked = config.validate()
    assert checked == config
    assert checked.local.sasl_oauth_token_provider is token_provider
    assert Syncer(config).config == config


def test_a_secret_file_is_read_for_a_config_built_in_code(tmp_path: Path) -> None:
    secret = tmp_path / "password"
    secret.write_text("s3cret\n")
    local = ClusterConfig(
        "127.0.0.1:9",
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_username="u",
        sasl_password_file=str(secret),
    )
    checked = in_code(local=local).validate()
    assert checked.local.sasl_password == "s3cret"
    assert checked.validate() == checked  # checking again reads the file again, no clash


async def test_the_library_adds_no_logging_handlers() -> None:
    root_handlers = list(logging.getLogger().handlers)
    for module in pkgutil.walk_packages([str(PACKAGE)], "syncer."):
        if not module.name.endswith("__main__"):  # that one runs the command line
            importlib.import_module(module.name)
    Syncer(in_code())
    assert logging.getLogger().handlers == root_handlers
    syncer_loggers = [
        logger
        for name, logger in logging.Logger.manager.loggerDict.items()
        if name.startswith("syncer") and isinstance(logger, logging.Logger)
    ]
    assert syncer_loggers and all(not logger.handlers for logger in syncer_loggers)


def test_only_the_command_lines_configure_logging() -> None:
    configuring = [
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if any(call in path.read_text() for call in ("basicConfig(", "addHandler(", "dictConfig("))
    ]
    assert configuring == ["cli.py"]


def test_the_public_api_is_curated_typed_and_documented() -> None:
    assert (PACKAGE / "py.typed").exists()
    assert sorted(syncer.__all__) == syncer.__all__
    for name in syncer.__all__:
        value = getattr(syncer, name)
        assert inspect.getdoc(value), f"syncer.{name} has no docstring"
    for name in ("Syncer", "Config", "Halted", "CaughtUp", "Snapshot", "PartitionStatus"):
        assert name in syncer.__all__
    for method in ("start", "stop", "catch_up", "run", "events", "snapshot", "request_stop"):
        assert inspect.getdoc(getattr(Syncer, method)), f"Syncer.{method} has no docstring"


def test_every_public_error_is_a_syncer_error_with_an_exit_code() -> None:
    exported = [getattr(syncer, n) for n in syncer.__all__]
    errors = [e for e in exported if isinstance(e, type) and issubclass(e, Exception)]
    assert len(errors) == 12
    for error in errors:
        assert issubclass(error, syncer.SyncerError)
        assert isinstance(error.exit_code, int)
    assert issubclass(syncer.HoleFound, syncer.PartitionHalted)
    assert syncer.TransientClusterError.retriable
