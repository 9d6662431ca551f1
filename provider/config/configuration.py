"""`Configuration`: every option's value, validated once, read by option.

Keys come from a YAML file (`--config FILE` or `SPARKDISPATCH_CONF`) of flat dotted keys, as
`flink-conf.yaml` has them, overridden by `-D key=value` on the command line. Every key is
declared in `sparkdispatch.config.options`; an unknown key or a bad value raises
`ConfigurationError` naming it. Keys under `spark.` other than `spark.master` are Spark
properties, passed as they are to every TaskExecutor's Spark Connect server (the Spark driver
its slot processes share).
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar, cast
from urllib.parse import quote, urlsplit, urlunsplit

import yaml

from sparkdispatch.config.option import ConfigOption
from sparkdispatch.config.options import (
    BROKER_URL,
    CLUSTER_SECRET,
    CLUSTER_SECRET_FILE,
    HA_ZOOKEEPER_AUTH,
    OPTIONS,
    OPTIONS_BY_KEY,
    REST_ADDRESS,
    REST_AUTH_TOKEN,
    REST_AUTH_TOKEN_FILE,
    REST_PORT,
    REST_SSL_ENABLED,
    SPARK_PROPERTIES,
    STORAGE_DIR,
    STORAGE_RESULTS_DIR,
)
from sparkdispatch.errors import ConfigurationError

T = TypeVar("T")

CONFIG_ENV_VAR = "SPARKDISPATCH_CONF"
TOKEN_ENV_VAR = "SPARKDISPATCH_AUTH_TOKEN"
CLUSTER_SECRET_ENV_VAR = "SPARKDISPATCH_CLUSTER_SECRET"
ZOOKEEPER_AUTH_ENV_VAR = "SPARKDISPATCH_ZOOKEEPER_AUTH"
BROKER_PASSWORD_ENV_VAR = "SPARKDISPATCH_BROKER_PASSWORD"
#: Keys whose values are secrets: kept out of `repr` and of a child's command line.
SECRET_KEYS = frozenset({REST_AUTH_TOKEN.key, CLUSTER_SECRET.key, HA_ZOOKEEPER_AUTH.key, BROKER_URL.key})
SPARK_PREFIX = SPARK_PROPERTIES.prefix


class Configuration:
    """A frozen, validated value of every declared option, and the Spark properties.

    `config.get(HEARTBEAT_INTERVAL)` is a float of seconds; options not set have their default.
    Build it with `Configuration.load(...)` or `Configuration.from_mapping(...)`.
    """

    __slots__ = ("_values", "_spark")

    def __init__(self, values: Mapping[str, object], spark: Mapping[str, str]) -> None:
        self._values = MappingProxyType(dict(values))
        self._spark = MappingProxyType(dict(spark))

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any] | None = None) -> Configuration:
        """Validate `raw` (flat dotted keys) and fill in defaults."""
        values: dict[str, object] = {o.key: o.default for o in OPTIONS}
        spark: dict[str, str] = {}
        problems: list[str] = []
        for key, value in (raw or {}).items():
            key = str(key).strip()
            option = OPTIONS_BY_KEY.get(key)
            if option is None:
                if SPARK_PROPERTIES.matches(key):
                    spark[key] = "" if value is None else str(value)
                    continue
                hint = _closest_key(key)
                problems.append(f"unknown configuration key {key!r}" + (f" (did you mean {hint!r}?)" if hint else ""))
                continue
            try:
                values[key] = option.parse(value)
            except ValueError as exc:
                problems.append(f"bad value for {key!r}: {exc}")
        if problems:
            raise ConfigurationError(problems[0], details=problems[1:])
        return cls(values, spark)

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str] | None = None,
        overrides: Iterable[str] | Mapping[str, Any] = (),
        *,
        environ: Mapping[str, str] | None = None,
    ) -> Configuration:
        """Read the YAML file (`path`, else `$SPARKDISPATCH_CONF`, else none), then apply overrides.

        `overrides` are `key=value` strings from `-D`, or a mapping.
        """
        environ = os.environ if environ is None else environ
        raw: dict[str, Any] = {}
        source = path if path is not None else environ.get(CONFIG_ENV_VAR) or None
        if source is not None:
            raw.update(read_yaml_file(Path(source)))
        raw.update(parse_overrides(overrides) if not isinstance(overrides, Mapping) else overrides)
        return cls.from_mapping(raw)

    def with_overrides(self, overrides: Mapping[str, Any]) -> Configuration:
        """A new Configuration: this one's explicit values with `overrides` on top."""
        return Configuration.from_mapping({**self.to_flat(), **overrides})

    def get(self, option: ConfigOption[T]) -> T:
        """The value of `option`, one of those declared in `sparkdispatch.config.options`."""
        if not isinstance(option, ConfigOption):
            raise TypeError(
                f"a Configuration is read by a ConfigOption of sparkdispatch.config.options, "
                f"not by {type(option).__name__} {option!r}"
            )
        if OPTIONS_BY_KEY.get(option.key) is not option:
            raise ConfigurationError(
                f"configuration option {option.key!r} is not one declared in "
                "sparkdispatch.config.options: declare it there, once, and read it by that "
                "declaration"
            )
        return cast(T, self._values[option.key])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Configuration):
            return NotImplemented
        return self._values == other._values and self._spark == other._spark

    def __repr__(self) -> str:
        changed = {k: v for k, v in self.to_flat().items() if k not in SECRET_KEYS}
        return f"Configuration({changed})"

    @property
    def auth_token(self) -> str:
        """The REST token: `rest.auth.token`, else `rest.auth.token-file`'s content, else
        `$SPARKDISPATCH_AUTH_TOKEN`; empty for none. `ConfigurationError` if the file cannot be read."""
        return self._secret(REST_AUTH_TOKEN, REST_AUTH_TOKEN_FILE, TOKEN_ENV_VAR, "token")

    @property
    def cluster_secret(self) -> str:
        """The TaskExecutors' credential: `cluster.secret`, else `cluster.secret-file`'s content, else
        `$SPARKDISPATCH_CLUSTER_SECRET`; empty for none. `ConfigurationError` if the file cannot be read."""
        return self._secret(CLUSTER_SECRET, CLUSTER_SECRET_FILE, CLUSTER_SECRET_ENV_VAR, "secret")

    @property
    def zookeeper_auth(self) -> str:
        """`user:password` of ZooKeeper's digest ACLs: `high-availability.zookeeper.auth`, else
        `$SPARKDISPATCH_ZOOKEEPER_AUTH`; empty for none."""
        return self.get(HA_ZOOKEEPER_AUTH) or os.environ.get(ZOOKEEPER_AUTH_ENV_VAR, "").strip()

    @property
    def broker_url(self) -> str:
        """`broker.url`, a Redis one without a password given `$SPARKDISPATCH_BROKER_PASSWORD`'s."""
        url = self.get(BROKER_URL)
        password = os.environ.get(BROKER_PASSWORD_ENV_VAR, "").strip()
        parts = urlsplit(url)
        if not password or parts.scheme not in ("redis", "rediss") or parts.password is not None:
            return url
        user = parts.username or ""
        return urlunsplit(parts._replace(netloc=f"{quote(user)}:{quote(password, safe='')}@{parts.netloc}"))

    @property
    def task_executor_credential(self) -> str:
        """What a TaskExecutor sends as its bearer token: the cluster secret, else the REST token."""
        return self.cluster_secret or self.auth_token

    def _secret(self, option: ConfigOption[str], file_option: ConfigOption[str], env_var: str, what: str) -> str:
        if value := self.get(option):
            return value
        if path := self.get(file_option):
            try:
                value = Path(os.path.expanduser(path)).read_text().strip()
            except OSError as exc:
                raise ConfigurationError(f"{file_option.key} {path!r} cannot be read: {exc.strerror or exc}") from None
            if not value:
                raise ConfigurationError(f"{file_option.key} {path!r} is empty: write the {what} in it")
            return value
        return os.environ.get(env_var, "").strip()

    @property
    def spark_properties(self) -> Mapping[str, str]:
        """Spark properties (`spark.*` keys other than `spark.master`)."""
        return self._spark

    @property
    def storage_dir(self) -> Path:
        return Path(os.path.expanduser(self.get(STORAGE_DIR)))

    @property
    def results_dir(self) -> str:
        return self.get(STORAGE_RESULTS_DIR) or str(self.storage_dir / "results")

    @property
    def rest_url(self) -> str:
        """The advertised `http(s)://address:port` of the REST endpoint (https with `rest.ssl.enabled`)."""
        return f"{self.rest_scheme}://{self.get(REST_ADDRESS)}:{self.get(REST_PORT)}"

    @property
    def rest_scheme(self) -> str:
        return "https" if self.get(REST_SSL_ENABLED) else "http"

    def to_flat(self) -> dict[str, str]:
        """Every key that differs from its default, as strings `-D` or a YAML file accept."""
        flat: dict[str, str] = {}
        for option in OPTIONS:
            value = self._values[option.key]
            if value != option.default:
                flat[option.key] = option.format(value)
        flat.update(self._spark)
        return flat

    def write_file(self, path: Path) -> None:
        """Write `to_flat()` as a YAML file only its owner may read (0600): how a child process gets
        a configuration that holds secrets, which a command line would show to every user."""
        path.parent.mkdir(parents=True, exist_ok=True)
        text = yaml.safe_dump(self.to_flat(), default_flow_style=False, sort_keys=True)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as out:
            os.fchmod(out.fileno(), 0o600)  # an older file of the same name may have had other bits
            out.write(text)

    def to_overrides(self) -> list[str]:
        """`-D` arguments that rebuild this configuration in a child process (secrets included: a
        child of a configuration with secrets gets `write_file`'s file instead)."""
        args: list[str] = []
        for key, value in self.to_flat().items():
            args += ["-D", f"{key}={value}"]
        return args


def _closest_key(key: str) -> str | None:
    matches = difflib.get_close_matches(key, OPTIONS_BY_KEY.keys(), n=1, cutoff=0.75)
    return matches[0] if matches else None


def read_yaml_file(path: Path) -> dict[str, Any]:
    """A flat YAML mapping of dotted keys; nested mappings are refused with the key that nests."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigurationError(f"cannot read configuration file {path}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigurationError(f"configuration file {path} is not valid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigurationError(f"configuration file {path} must be a mapping of dotted keys to values")
    for key, value in data.items():
        if isinstance(value, (dict, list)):
            raise ConfigurationError(
                f"configuration key {key!r} in {path} must have a single value; write "
                "nested keys flat, as `a.b.c: value`"
            )
    return {str(k): v for k, v in data.items()}


def parse_overrides(items: Iterable[str]) -> dict[str, str]:
    """`["key=value", ...]` from `-D` options → a mapping."""
    overrides: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigurationError(f"-D expects key=value, got {item!r}")
        overrides[key.strip()] = value.strip()
    return overrides
