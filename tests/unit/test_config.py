"""Configuration (D14): keys, defaults, durations, sources, cross-checks, and errors that name keys only."""

from __future__ import annotations

import sys
import tempfile
from datetime import UTC, timedelta
from typing import Any

import pytest

from app.domain.rates import Rate
from app.errors import ConfigError
from app.platform import config
from tests.support import zygote

CANARY = "s3cr3t-Canary-7f1e"


def test_defaults_load_and_are_typed():
    cfg = config.load({})
    assert cfg.file.gc_batch_size == 500
    assert cfg.file.unattached_ttl == timedelta(days=1)
    assert cfg.file.storage.driver == "fs"
    assert cfg.file.part_size == 8 * 1024 * 1024
    assert cfg.get("privacy.object_delete_delay") == timedelta(days=1)


def test_every_key_of_d14_exists():
    required = {
        "file.upload_session_ttl",
        "file.unattached_ttl",
        "file.failed_row_ttl",
        "file.gc_interval",
        "file.gc_batch_size",
        "file.part_size",
        "file.max_size",
        "file.storage.driver",
        "file.fs.root",
        "file.max_attachments",
        "privacy.object_delete_delay",
        "database.url",
        "database.tx_retry_max",
        "database.pool_size",
        "broker.url",
        "api.host",
        "api.port",
        "api.workers",
        "metrics.port",
        "scan.clamd_address",
        "scan.timeout",
        "sentry.dsn",
        "log.format",
        "schedule.timezone",
    }
    assert required <= set(config.KEYS_BY_NAME)
    assert any(name.startswith("file.s3.") for name in config.KEYS_BY_NAME)
    assert any(name.startswith("auth.") for name in config.KEYS_BY_NAME)
    for key in config.KEYS:
        assert key.description and key.env.startswith("LETHE_")


def test_environment_variable_names():
    assert config.KEYS_BY_NAME["file.unattached_ttl"].env == "LETHE_FILE_UNATTACHED_TTL"
    assert config.KEYS_BY_NAME["file.s3.access_key"].env == "LETHE_FILE_S3_ACCESS_KEY"


@pytest.mark.parametrize(
    "text, seconds", [("90s", 90), ("15m", 900), ("24h", 86400), ("7d", 604800), ("250ms", 0.25), (" 2h ", 7200)]
)
def test_durations(text, seconds):
    assert config.parse_duration(text) == seconds
    assert config.load({"LETHE_SCAN_TIMEOUT": text}).scan.timeout == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "15", "1w", "-5m", "1.5h", "h", "15 minutes"])
def test_bad_durations_are_rejected(text):
    with pytest.raises(ValueError):
        config.parse_duration(text)


def test_format_duration_round_trips():
    for seconds in (90, 900, 86400, 604800, 0.25):
        assert config.parse_duration(config.format_duration(seconds)) == seconds


def test_sizes():
    assert config.load({"LETHE_FILE_MAX_SIZE": "2GiB"}).file.max_size == 2 * 1024**3
    assert config.load({"LETHE_FILE_MAX_SIZE": "1048576"}).file.max_size == 1048576


@pytest.mark.parametrize(
    "text, origins",
    [
        ("", ()),
        ("*", ("*",)),
        ("https://app.example.com", ("https://app.example.com",)),
        (" http://127.0.0.1:8081 , https://a.example/ ", ("http://127.0.0.1:8081", "https://a.example")),
    ],
)
def test_cors_origins(text, origins):
    assert config.load({"LETHE_API_CORS_ORIGINS": text}).api.cors_origins == origins


@pytest.mark.parametrize(
    "text",
    ["app.example.com", "ftp://a.example", "https://a.example/path", "https://a b", "https://secret-host.example?x"],
)
def test_bad_cors_origins_exit_2_naming_the_key_never_the_value(text):
    result = run_lethe("config", "check", env={"LETHE_API_CORS_ORIGINS": text})
    output = result.stdout + result.stderr
    assert result.returncode == 2 and "api.cors_origins" in output, output
    assert text not in output and "Traceback" not in output


def test_environment_overrides_the_file(tmp_path):
    path = tmp_path / "lethe.toml"
    path.write_text('[file]\ngc_batch_size = 7\nunattached_ttl = "2d"\n[file.storage]\ndriver = "fs"\n')
    cfg = config.load({"LETHE_CONFIG": str(path), "LETHE_FILE_GC_BATCH_SIZE": "9"})
    assert cfg.file.gc_batch_size == 9
    assert cfg.file.unattached_ttl == timedelta(days=2)


def test_unknown_key_in_the_file_is_an_error(tmp_path):
    path = tmp_path / "lethe.toml"
    path.write_text("[file]\ngc_batch_sise = 7\n")
    with pytest.raises(ConfigError) as info:
        config.load({"LETHE_CONFIG": str(path)})
    assert list(info.value.errors) == ["file.gc_batch_sise"]


def test_unreadable_or_broken_file(tmp_path):
    with pytest.raises(ConfigError) as info:
        config.load({"LETHE_CONFIG": str(tmp_path / "missing.toml")})
    assert "LETHE_CONFIG" in info.value.errors
    broken = tmp_path / "broken.toml"
    broken.write_text(f"[file\n{CANARY}")
    with pytest.raises(ConfigError) as info:
        config.load({"LETHE_CONFIG": str(broken)})
    assert CANARY not in str(info.value)


@pytest.mark.parametrize(
    "env, key",
    [
        ({"LETHE_FILE_GC_BATCH_SIZE": "0"}, "file.gc_batch_size"),
        ({"LETHE_FILE_GC_BATCH_SIZE": CANARY}, "file.gc_batch_size"),
        ({"LETHE_FILE_STORAGE_DRIVER": CANARY}, "file.storage.driver"),
        ({"LETHE_FILE_UNATTACHED_TTL": CANARY}, "file.unattached_ttl"),
        ({"LETHE_API_PORT": CANARY}, "api.port"),
        ({"LETHE_FILE_S3_SECURE": CANARY}, "file.s3.secure"),
        ({"LETHE_SCHEDULE_TIMEZONE": CANARY}, "schedule.timezone"),
        ({"LETHE_LOG_FORMAT": CANARY}, "log.format"),
        ({"LETHE_FILE_STORAGE_DRIVER": "s3"}, "file.s3.endpoint"),
        ({"LETHE_DATABASE_URL": "mysql://root:" + CANARY + "@db/x"}, "database.url"),
        ({"LETHE_BROKER_URL": CANARY}, "broker.url"),
        ({"LETHE_JOURNAL_WRITE_LINGER": "2s"}, "journal.write_linger"),
        ({"LETHE_JOURNAL_WRITE_INTERVAL": "2s"}, "journal.write_interval"),
    ],
)
def test_errors_name_the_key_and_never_the_value(env, key):
    with pytest.raises(ConfigError) as info:
        config.load(env)
    assert key in info.value.errors
    assert CANARY not in str(info.value) and CANARY not in repr(info.value.errors)


def test_gc_interval_must_be_shorter_than_the_delete_delay():
    with pytest.raises(ConfigError) as info:
        config.load({"LETHE_FILE_GC_INTERVAL": "2d", "LETHE_PRIVACY_OBJECT_DELETE_DELAY": "1d"})
    assert set(info.value.errors) == {"file.gc_interval", "privacy.object_delete_delay"}
    with pytest.raises(ConfigError):
        config.load({"LETHE_FILE_GC_INTERVAL": "1d", "LETHE_PRIVACY_OBJECT_DELETE_DELAY": "1d"})
    assert config.load({"LETHE_FILE_GC_INTERVAL": "1h", "LETHE_PRIVACY_OBJECT_DELETE_DELAY": "1d"})


def test_a_presigned_download_never_outlives_the_delete_delay_and_a_proxy_needs_no_presign_ttl():
    short = {"LETHE_FILE_GC_INTERVAL": "1s", "LETHE_PRIVACY_OBJECT_DELETE_DELAY": "3s"}
    # proxied downloads hand out no URL: a short delay needs nothing else (a drill's store outage runs so)
    assert config.load(short).file.s3.presign_ttl == timedelta(seconds=60)
    with pytest.raises(ConfigError) as info:
        config.load({**short, "LETHE_FILE_S3_DOWNLOAD": "redirect"})
    assert set(info.value.errors) == {"file.s3.presign_ttl"}
    assert config.load({**short, "LETHE_FILE_S3_DOWNLOAD": "redirect", "LETHE_FILE_S3_PRESIGN_TTL": "3s"})
    for bad in ("0s", "8d"):
        with pytest.raises(ConfigError) as info:
            config.load({"LETHE_FILE_S3_PRESIGN_TTL": bad})
        assert set(info.value.errors) == {"file.s3.presign_ttl"}


def test_every_error_is_reported_at_once():
    with pytest.raises(ConfigError) as info:
        config.load(
            {
                "LETHE_FILE_GC_BATCH_SIZE": "x",
                "LETHE_API_PORT": "0",
                "LETHE_FILE_GC_INTERVAL": "2d",
                "LETHE_PRIVACY_OBJECT_DELETE_DELAY": "1d",
            }
        )
    assert {"file.gc_batch_size", "api.port", "file.gc_interval", "privacy.object_delete_delay"} <= set(
        info.value.errors
    )


def test_replace_revalidates():
    cfg = config.load({})
    assert config.with_changes(cfg, {"file.gc_batch_size": 2}).file.gc_batch_size == 2
    with pytest.raises(ConfigError):
        config.with_changes(cfg, {"file.gc_batch_size": 0})


def run_lethe(*args, env):
    """A command in a folder of its own: where `make run` ran (a `.lethe` folder), `lethe config check` checks the
    running dev server instead, and a developer's checkout may hold one."""
    with tempfile.TemporaryDirectory() as folder:
        return zygote.run(
            [sys.executable, "-m", "app.entry", *args],
            capture_output=True,
            text=True,
            env={"PATH": "/usr/bin:/bin", **env},
            timeout=60,
            cwd=folder,
        )


def test_config_check_prints_ok():
    result = run_lethe("config", "check", env={"LETHE_AUTH_JWT_SECRET": "a-secret-of-sufficient-length-000"})
    assert result.returncode == 0 and result.stdout.strip() == "OK"


def test_no_signing_key_exits_2_naming_both_keys():
    """Issue 21, point 5: the api started without a key, reported ready and answered 401 to everyone."""
    for args in (("config", "check"), ("api",)):
        result = run_lethe(
            *args,
            env={
                "LETHE_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none",
                "LETHE_BROKER_URL": "amqp://guest:guest@127.0.0.1:1/",
            },
        )
        output = result.stdout + result.stderr
        assert result.returncode == 2, output
        assert "auth.jwt_secret" in output and "auth.jwt_public_key" in output
        assert "Traceback" not in output and "nobody" not in output


def test_config_check_exits_2_naming_both_keys_and_neither_value():
    """The 'done when' of the foundation issue, as an operator would run it."""
    result = run_lethe(
        "config", "check", env={"LETHE_FILE_GC_INTERVAL": "2d", "LETHE_PRIVACY_OBJECT_DELETE_DELAY": "1d"}
    )
    output = result.stdout + result.stderr
    assert result.returncode == 2
    assert "file.gc_interval" in output and "privacy.object_delete_delay" in output
    assert "2d" not in output and "1d" not in output


@pytest.mark.parametrize("role", [["api"], ["worker"], ["scheduler"], ["migrate"], ["dev"]])
def test_every_role_exits_2_on_a_bad_configuration_before_doing_anything(role, tmp_path):
    result = run_lethe(
        *role,
        env={
            "LETHE_FILE_GC_BATCH_SIZE": CANARY,
            "LETHE_DATABASE_URL": CANARY,
            "LETHE_FILE_FS_ROOT": str(tmp_path / "objects"),
        },
    )
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert "file.gc_batch_size" in output
    assert CANARY not in output
    assert not (tmp_path / "objects").exists()  # it did nothing


@pytest.mark.parametrize("role", [["api"], ["worker"], ["scheduler"], ["migrate"]])
def test_production_roles_need_a_database_url(role):
    result = run_lethe(*role, env={})
    assert result.returncode == 2
    assert "database.url" in result.stderr


def test_token_command_mints_a_verifiable_token():
    import uuid

    from app.api.auth import Authenticator

    sub = uuid.uuid4()
    result = run_lethe(
        "token",
        "--sub",
        str(sub),
        "--scope",
        "files:read",
        "manage",
        "--ttl",
        "2h",
        env={"LETHE_AUTH_JWT_SECRET": "a-secret-of-sufficient-length-000"},
    )
    assert result.returncode == 0, result.stderr
    principal = Authenticator("a-secret-of-sufficient-length-000").principal("Bearer " + result.stdout.strip())
    assert principal.id == sub and principal.scopes == {"files:read", "manage"}


def test_token_command_refuses_bad_input():
    env = {"LETHE_AUTH_JWT_SECRET": "a-secret-of-sufficient-length-000"}
    assert run_lethe("token", "--sub", "nope", env=env).returncode == 2
    assert (
        run_lethe("token", "--sub", "6f1c1a52-3a57-4c7e-9d0e-7f1e0c4b8a11", "--scope", "root", env=env).returncode == 2
    )
    assert (
        run_lethe(
            "token", "--sub", "6f1c1a52-3a57-4c7e-9d0e-7f1e0c4b8a11", "--state-dir", "/nonexistent", env={}
        ).returncode
        == 2
    )


@pytest.mark.parametrize("role", [["api"], ["worker"], ["scheduler"]])
def test_production_roles_need_a_broker_url(role):
    result = run_lethe(*role, env={"LETHE_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"})
    assert result.returncode == 2
    assert "broker.url" in result.stderr and "nobody" not in result.stderr


def test_the_purge_retry_base_may_not_exceed_its_max():
    from app.errors import ConfigError
    from app.platform import config

    with pytest.raises(ConfigError) as raised:
        config.load({"LETHE_FILE_PURGE_RETRY_BASE": "2h", "LETHE_FILE_PURGE_RETRY_MAX": "1h"})
    assert "file.purge_retry_base" in raised.value.errors


def test_the_config_tree_names_exactly_the_keys_with_their_types():
    """Config is a tree of frozen dataclasses written out by hand (for mypy and readers): it cannot drift
    from KEYS, and each leaf has the type its key's field parses to (durations are timedeltas)."""
    import dataclasses
    import typing

    from app.platform import config

    def leaves(cls, prefix=""):
        for field in dataclasses.fields(cls):
            hint = typing.get_type_hints(cls)[field.name]
            if dataclasses.is_dataclass(hint):
                yield from leaves(hint, prefix + field.name + ".")
            else:
                yield prefix + field.name, hint

    expected = {
        config.Duration: timedelta,
        config.Size: int,
        config.Flag: bool,
        config.Number: int,
        config.EntryList: tuple,
        config.Origins: tuple,
        config.Durations: tuple,
        config.KeyringField: tuple,
    }
    limits = (config.LimitSize, config.LimitNumber)  # a count, or None: no limit
    tree: dict[str, Any] = dict(leaves(config.Config))
    assert set(tree) == set(config.KEYS_BY_NAME)
    for name, hint in tree.items():
        if isinstance(config.KEYS_BY_NAME[name].field, limits):
            assert hint == int | None, name
            continue
        if isinstance(config.KEYS_BY_NAME[name].field, config.RateField):
            assert hint == Rate | None, name
            continue
        assert (typing.get_origin(hint) or hint) is expected.get(type(config.KEYS_BY_NAME[name].field), str), name
    cfg = config.load({})
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(cfg.file, "gc_batch_size", 1)  # noqa: B010 (the assignment a frozen dataclass refuses)


@pytest.mark.parametrize(
    "name, too_small, least",
    [
        ("database.connect_timeout", "1s", "2s"),  # libpq's smallest
        ("database.pool_timeout", "50ms", "100ms"),
        ("database.statement_timeout", "50ms", "100ms"),
        ("database.keepalive", "500ms", "1s"),
        ("schedule.leader_timeout", "2s", "3s"),
        ("file.s3.timeout", "500ms", "1s"),
    ],
)
def test_outage_bounds_have_a_floor(name, too_small, least):
    env = config.KEYS_BY_NAME[name].env
    with pytest.raises(ConfigError) as info:
        config.load({env: too_small})
    assert info.value.errors[name] == [f"Must be at least {least}."]
    assert config.load({env: least}).get(name).total_seconds() > 0


def test_the_database_timeouts_reach_libpq_and_the_server():
    from app.entry.wiring import database_timeouts

    timeouts = database_timeouts(config.load({"LETHE_DATABASE_STATEMENT_TIMEOUT": "2s"}))
    kwargs = timeouts.connect_kwargs("postgresql://u@h/db?options=-c%20search_path%3Dlethe")
    assert kwargs["connect_timeout"] == 3 and kwargs["keepalives"] == 1 and kwargs["keepalives_idle"] == 10
    assert "-c search_path=lethe" in kwargs["options"]  # an operator's own options are kept
    assert "-c statement_timeout=2000" in kwargs["options"] and "tcp_keepalives_idle=10" in kwargs["options"]
    assert timeouts.answer == 3.0  # the client gives up a second after the server would have


def test_the_token_leeway_is_a_key_with_a_ceiling():
    import uuid
    from datetime import datetime, timedelta

    from app.api.auth import Authenticator
    from app.entry.token import mint_token
    from app.errors import Unauthorized

    cfg = config.load({"LETHE_AUTH_JWT_SECRET": "s" * 32, "LETHE_AUTH_LEEWAY": "5s"})
    assert cfg.auth.leeway == timedelta(seconds=5)
    with pytest.raises(ConfigError) as info:
        config.load({"LETHE_AUTH_LEEWAY": "1h"})
    assert "auth.leeway" in info.value.errors
    expired_10s_ago = mint_token(
        "s" * 32, uuid.uuid4(), ttl=timedelta(seconds=60), now=datetime.now(UTC) - timedelta(seconds=70)
    )
    with pytest.raises(Unauthorized):
        Authenticator.from_config(cfg).principal("Bearer " + expired_10s_ago)
    lenient = config.load({"LETHE_AUTH_JWT_SECRET": "s" * 32, "LETHE_AUTH_LEEWAY": "30s"})
    assert Authenticator.from_config(lenient).principal("Bearer " + expired_10s_ago).scopes


def test_several_stores_are_parsed_and_their_errors_name_the_store_and_setting_never_a_value():
    from app.errors import ConfigError
    from app.platform.config import build

    secret = "Canary-store-secret-8812"
    cfg = build(
        {
            "file.stores": '{"garage": {"driver": "s3", "endpoint": "garage:3900", "bucket": "lethe", '
            f'"secret_key": "{secret}", "timeout": "5s"}}, "disk": {{"driver": "fs", "root": "/srv/objects"}}}}',
            "file.store.primary": "garage",
        }
    )
    garage, disk = cfg.file.stores
    assert garage.name == "garage" and garage.s3 is not None and garage.s3.timeout.total_seconds() == 5
    assert disk.fs is not None and disk.fs.root == "/srv/objects" and cfg.file.store.primary == "garage"
    for raw, expected in (
        ('{"default": {"driver": "fs"}}', "store default: default is the store of file.storage.driver"),
        ('{"Bad Name": {"driver": "fs"}}', "store entry 1: the name must be"),
        ('{"b": {"driver": "nfs"}}', "store b: driver must be s3 or fs"),
        (f'{{"b": {{"driver": "s3", "endpoint": "", "secret_key": "{secret}"}}}}', "store b: endpoint is required"),
        (f'{{"b": {{"driver": "s3", "endpoint": "e:1", "{secret}": 1}}}}', "store b: a setting is not a s3 setting"),
        ('{"b": {"driver": "fs", "root": "./.lethe/objects"}}', "uses the bucket (or fs root) of another store"),
        ("[]", "Must be a JSON object"),
    ):
        with pytest.raises(ConfigError) as refused:
            build({"file.stores": raw})
        assert expected in str(refused.value) and secret not in str(refused.value)
    with pytest.raises(ConfigError, match="file.store.primary: Must be default or the name of a store"):
        build({"file.store.primary": "garage"})
