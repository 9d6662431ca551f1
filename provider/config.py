"""Configuration: one frozen object, built once from flat dotted keys.

Keys come from a YAML file (`--config FILE` or `SPARKDISPATCH_CONF`) of flat dotted keys, as
`flink-conf.yaml` has them, overridden by `-D key=value` on the command line. Every key is
declared in `OPTIONS` with its type and default; an unknown key or a bad value raises
`ConfigurationError` naming it. Durations are written as Flink writes them (`500ms`, `4s`,
`1min`; a bare number is milliseconds) and read back as float seconds; sizes (`10mb`) as
bytes. Keys under `spark.` other than `spark.master` are Spark properties, passed as they are
to every TaskExecutor's Spark Connect server (the Spark driver its slot processes share).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from sparkdispatch.errors import ConfigurationError
from sparkdispatch.jobgraph import (
    ExponentialDelayRestart,
    FailureRateRestart,
    FixedDelayRestart,
    NoRestart,
    RestartStrategy,
)

CONFIG_ENV_VAR = "SPARKDISPATCH_CONF"
TOKEN_ENV_VAR = "SPARKDISPATCH_AUTH_TOKEN"
SPARK_PREFIX = "spark."


@dataclass(frozen=True)
class Option:
    """One configuration key: its type, default and what it does."""

    key: str
    kind: str  # str | int | float | bool | duration | size | choice
    default: Any
    description: str
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    default_doc: str | None = None  # how the default reads in the docs, where it is computed


def _cpu_count() -> int:
    return os.cpu_count() or 1


OPTIONS: tuple[Option, ...] = (
    # Logging
    Option("log.format", "choice", "text", "How master and TaskExecutor processes log to stderr: `text` lines, or "
           "`json`, an object per line for log shippers; both name the job, vertex, subtask and attempt a line is "
           "about.", choices=("text", "json")),
    # REST endpoint
    Option("rest.address", "str", "127.0.0.1", "Address the master advertises for its REST endpoint and web UI; "
           "with `high-availability.mode: none` also where TaskExecutors and clients find the master."),
    Option("rest.bind-address", "str", "", "Address the REST endpoint binds to; empty means `rest.address`."),
    Option("rest.port", "int", 8081, "Port of the REST endpoint and web UI (Flink's default). 0 picks a free port.",
           minimum=0),
    Option("rest.max-body-size", "size", 10 * 1024 * 1024, "Largest request body accepted; larger ones get 413.",
           minimum=1024, default_doc="10mb"),
    Option("rest.auth.token", "str", "", "When set, every REST call must send `Authorization: Bearer <token>`; "
           "TaskExecutors and clients send it. Empty: the content of `rest.auth.token-file`, else the "
           "`SPARKDISPATCH_AUTH_TOKEN` environment variable, else no authentication."),
    Option("rest.auth.token-file", "str", "", "A file holding the token (surrounding whitespace ignored), read when "
           "`rest.auth.token` is empty: the token then appears in no command line."),
    Option("rest.auth.allow-unauthenticated", "bool", False, "Let a master without a token listen on an address "
           "other than loopback. Off, such a master refuses to start: whoever reaches its port could run code "
           "on the TaskExecutors."),
    Option("rest.ssl.enabled", "bool", False, "Serve the REST endpoint and web UI over HTTPS, and call it over "
           "HTTPS (the CLI, TaskExecutors, standbys): the master then needs `rest.ssl.certificate` and "
           "`rest.ssl.key`, its clients verify it against `rest.ssl.ca-file` or the system's trust store."),
    Option("rest.ssl.certificate", "str", "", "The master's PEM certificate (chain) file."),
    Option("rest.ssl.key", "str", "", "The PEM private key file of `rest.ssl.certificate`."),
    Option("rest.ssl.client-ca", "str", "", "A PEM CA file: when set, the master accepts only clients presenting "
           "a certificate signed by it (mutual TLS)."),
    Option("rest.ssl.ca-file", "str", "", "The PEM CA file clients verify the master's certificate against; "
           "empty: the system's trust store."),
    Option("rest.ssl.client-certificate", "str", "", "The PEM certificate a client presents when the master asks "
           "for one (`rest.ssl.client-ca`)."),
    Option("rest.ssl.client-key", "str", "", "The PEM private key file of `rest.ssl.client-certificate`."),
    Option("rest.execution-result.long-poll", "duration", 1.0, "How long `GET /jobs/{id}/execution-result` waits "
           "for a running job to end before it answers IN_PROGRESS.", minimum=0, default_doc="1s"),
    # High availability
    Option("high-availability.mode", "choice", "none", "`none`: one master, always leader, stores on the local "
           "filesystem under `storage.dir`. `zookeeper`: leader election, retrieval and the JobGraph store on "
           "ZooKeeper.", choices=("none", "zookeeper")),
    Option("high-availability.cluster-id", "str", "default", "Names this cluster; its ZooKeeper nodes and stored "
           "files live under it, so several clusters can share one ensemble and one storage dir."),
    Option("high-availability.zookeeper.quorum", "str", "127.0.0.1:2181", "ZooKeeper ensemble, `host:port,...`."),
    Option("high-availability.zookeeper.path.root", "str", "/sparkdispatch", "Root znode of all sparkdispatch "
           "clusters."),
    Option("high-availability.zookeeper.session-timeout", "duration", 20.0, "ZooKeeper session timeout. A killed "
           "leader is replaced after about this long. Flink uses 60s; we pick 20s because batch jobs wait for the "
           "takeover, and ZooKeeper caps sessions at 20 ticks (40s with Debian's tickTime).", minimum=1.0,
           default_doc="20s"),
    Option("high-availability.zookeeper.connection-timeout", "duration", 15.0, "How long to wait for the first "
           "ZooKeeper connection before giving up (Flink's default).", minimum=0.1, default_doc="15s"),
    Option("high-availability.zookeeper.tolerate-suspended-connections", "bool", False, "Keep leadership while the "
           "ZooKeeper connection is SUSPENDED and revoke only when the session is LOST. Off by default: a "
           "suspended leader may already have been replaced (FLINK-10052 explains the trade-off)."),
    Option("high-availability.zookeeper.auth", "str", "", "`user:password`: create every node with a digest ACL "
           "for this identity, so other ZooKeeper users can neither read nor change them."),
    Option("high-availability.zookeeper.inline-limit", "size", 64 * 1024, "JobGraphs up to this size live in their "
           "znode; larger ones are written under `storage.dir` and the znode holds a pointer.", minimum=0,
           default_doc="64kb"),
    # Storage
    Option("storage.dir", "str", "~/.sparkdispatch", "Directory for the JobResult store, blobs, archived jobs and, "
           "with `high-availability.mode: none`, the JobGraph and progress stores. Shared by all masters in HA."),
    Option("storage.results-dir", "str", "", "Where tasks write result partitions; any path or URI Spark can write "
           "(`hdfs://`, `s3a://`). Empty means `<storage.dir>/results`; TaskExecutors on several hosts need a "
           "shared one."),
    Option("job-result-store.delete-on-commit", "bool", True, "Delete a JobResult file once its job is cleaned "
           "up; otherwise rename `<id>_DIRTY.json` to `<id>.json` and keep it (Flink's semantics)."),
    Option("results.retention", "choice", "keep", "What happens to a finished job's intermediate results at "
           "cleanup: `keep` them, or `delete` them.", choices=("keep", "delete")),
    Option("jobstore.max-in-memory", "int", 200, "Finished jobs kept in memory for queries; older ones are read "
           "from the archive on disk.", minimum=1),
    Option("blob.max-size", "size", 100 * 1024 * 1024, "Largest user-code artifact accepted.", minimum=1,
           default_doc="100mb"),
    Option("blob.retention", "duration", 7 * 86400.0, "A stored artifact that no stored job names and that was "
           "neither uploaded nor named by a submission or repair for this long is removed; a repair of a job "
           "whose code was removed is refused.", minimum=1.0, default_doc="7d"),
    Option("blob.cleanup-interval", "duration", 3600.0, "How often the leader looks for artifacts to remove.",
           minimum=0.1, default_doc="1h"),
    # Heartbeats and resources
    Option("heartbeat.interval", "duration", 5.0, "How often a TaskExecutor sends its heartbeat. Flink uses 10s; "
           "half that finds a lost TaskExecutor sooner for a small HTTP call per TaskExecutor.", minimum=0.05,
           default_doc="5s"),
    Option("heartbeat.timeout", "duration", 25.0, "A TaskExecutor silent this long is lost: its slots are removed "
           "and its tasks fail over. Flink uses 50s; five missed heartbeats here.", minimum=0.1,
           default_doc="25s"),
    Option("heartbeat.rpc-failure-threshold", "int", 2, "Consecutive failed calls (deployments, cancellations) "
           "after which a TaskExecutor counts as unreachable once it has also sent no heartbeat for half "
           "`heartbeat.timeout`, at least two `heartbeat.interval`s (-1: never), as Flink's key. A TaskExecutor that heartbeats is alive: calls that "
           "fail then are the broker's trouble, and are retried.", minimum=-1),
    Option("heartbeat.missing-execution-threshold", "int", 3, "Consecutive heartbeats of a TaskExecutor that may "
           "omit an execution its JobMaster deployed there before the execution fails over (a deployment lost on "
           "the way, a final state report lost). A deployment the TaskExecutor never listed gets "
           "`heartbeat.timeout` to arrive first.", minimum=1),
    Option("slot.request.timeout", "duration", 300.0, "A slot request nobody can fulfil fails after this long "
           "(Flink's default).", minimum=0.01, default_doc="5min"),
    Option("resourcemanager.taskmanager-timeout", "duration", 30.0, "A TaskExecutor whose slots have all been "
           "free this long is reported idle (Flink's default).", minimum=0.0, default_doc="30s"),
    Option("taskexecutor.slots", "int", _cpu_count(), "Slots per TaskExecutor: tasks it runs at once.", minimum=1,
           default_doc="number of CPU cores"),
    Option("taskexecutor.id", "str", "", "Identity of a TaskExecutor; empty means `<hostname>-<random>`."),
    Option("taskexecutor.metrics.port", "int", 0, "Port of a TaskExecutor's own Prometheus metrics (`/metrics`: "
           "slots, busy slots, attempts, slot processes lost, its Spark Connect server's health and restarts); "
           "0 serves none.", minimum=0),
    Option("taskexecutor.metrics.bind-address", "str", "127.0.0.1", "Address the TaskExecutor's metrics port "
           "binds to."),
    Option("taskexecutor.registration.max-backoff", "duration", 10.0, "Longest pause between attempts to "
           "register with the ResourceManager.", minimum=0.01, default_doc="10s"),
    Option("taskexecutor.cancellation.timeout", "duration", 30.0, "How long a cancelled task may run on after its "
           "Spark operations were interrupted before its slot process is killed and replaced (Flink's "
           "`task.cancellation.timeout`).", minimum=0.1, default_doc="30s"),
    Option("taskexecutor.artifact-cache.max-size", "size", 2 << 30, "Most a TaskExecutor's copies of user-code "
           "artifacts take on its disk (`<storage.dir>/te-cache/<id>/`); beyond it the least recently used ones are "
           "removed, never one a running task uses, and fetched again from the master when a task needs them.",
           minimum=1, default_doc="2gb"),
    Option("taskexecutor.slot-process.spares", "int", 1, "Slot processes a TaskExecutor keeps started and warm "
           "for the next slot that gets a task of other code (each about 145 MB).", minimum=0),
    # Celery broker
    Option("broker.url", "str", "redis://127.0.0.1:6379/0", "Celery broker carrying task deployments and "
           "remote-control calls: Redis in production, `filesystem://` in standalone mode."),
    Option("broker.polling-interval", "duration", 0.02, "Polling interval of polling transports "
           "(`filesystem://`). For a second after one of its tasks ended, when its slot's next deployment "
           "is due, a TaskExecutor polls every 1 ms.", minimum=0.001, default_doc="20ms"),
    Option("broker.timeout", "duration", 5.0, "Timeout of each call to the broker (connecting, sending a "
           "deployment or a remote-control call, each socket read and write), for the master and the TaskExecutors. "
           "A deployment that cannot be sent is retried with backoff.", minimum=0.1, default_doc="5s"),
    # Spark
    Option("spark.master", "str", "local[*]", "Spark master URL of every TaskExecutor's Spark Connect server "
           "(the Spark driver of its slots): `local[*]`, `spark://host:7077`, `yarn`, `k8s://...`."),
    Option("taskexecutor.connect.port", "int", 0, "Port of a TaskExecutor's Spark Connect server, bound on "
           "127.0.0.1 only. 0 picks a free port, so several TaskExecutors can share a host.", minimum=0),
    Option("taskexecutor.connect.start-timeout", "duration", 120.0, "How long a TaskExecutor waits for its Spark "
           "Connect server to start and warm up before it gives up.", minimum=1.0, default_doc="2min"),
    Option("taskexecutor.connect.driver-memory", "size", 1 << 30, "Heap of a TaskExecutor's Spark Connect server "
           "(the Spark driver of all its slots); a `spark.driver.memory` property overrides it.",
           minimum=128 << 20, default_doc="1gb"),
    Option("taskexecutor.connect.recycle.sessions", "int", 200, "A TaskExecutor replaces its Spark Connect server "
           "by a new one once its slot processes made this many job sessions on it (each job makes one per slot "
           "process it uses): Spark keeps part of every session that ran a Python UDF until its server stops. The "
           "successor starts before the old server stops, which ends once its running tasks ended; no task fails "
           "for it. 0: never for this reason.", minimum=0),
    Option("taskexecutor.connect.recycle.thread-growth", "int", 1000, "The Spark Connect server is also replaced "
           "once its JVM has this many threads more than right after its start. 0: never for this reason.",
           minimum=0),
    Option("taskexecutor.connect.recycle.open-file-growth", "int", 2000, "The Spark Connect server is also "
           "replaced once its JVM has this many open files (descriptors) more than right after its start. 0: "
           "never for this reason.", minimum=0),
    # Restart strategy
    Option("restart-strategy.type", "choice", "fixed-delay", "Restart strategy of jobs that name none. "
           "Flink's batch default is `none`; ours restarts, so a lost TaskExecutor does not fail a job.",
           choices=("none", "fixed-delay", "exponential-delay", "failure-rate")),
    Option("restart-strategy.fixed-delay.attempts", "int", 3, "Restarts before the job fails.", minimum=0),
    Option("restart-strategy.fixed-delay.delay", "duration", 1.0, "Pause before each restart.", minimum=0,
           default_doc="1s"),
    Option("restart-strategy.exponential-delay.initial-backoff", "duration", 1.0, "First pause.", minimum=0,
           default_doc="1s"),
    Option("restart-strategy.exponential-delay.max-backoff", "duration", 300.0, "Longest pause.", minimum=0,
           default_doc="5min"),
    Option("restart-strategy.exponential-delay.backoff-multiplier", "float", 2.0, "Growth of the pause.",
           minimum=1.0),
    Option("restart-strategy.exponential-delay.reset-backoff-threshold", "duration", 3600.0, "A job running "
           "this long without failure starts again from the initial backoff.", minimum=0, default_doc="1h"),
    Option("restart-strategy.exponential-delay.jitter-factor", "float", 0.1, "Random share added to or taken "
           "from each pause.", minimum=0.0),
    Option("restart-strategy.exponential-delay.attempts", "int", 10, "Restarts before the job fails.",
           minimum=0),
    Option("restart-strategy.failure-rate.max-failures-per-interval", "int", 1, "Failures allowed per interval.",
           minimum=1),
    Option("restart-strategy.failure-rate.failure-rate-interval", "duration", 60.0, "The interval.",
           minimum=0.001, default_doc="1min"),
    Option("restart-strategy.failure-rate.delay", "duration", 1.0, "Pause before each restart.", minimum=0,
           default_doc="1s"),
    # Cleanup of finished jobs
    Option("cleanup-strategy.initial-backoff", "duration", 1.0, "First pause before a failed cleanup of a "
           "finished job is retried (retries never end; FLINK-26652).", minimum=0.001, default_doc="1s"),
    Option("cleanup-strategy.max-backoff", "duration", 60.0, "Longest pause between cleanup retries.",
           minimum=0.001, default_doc="1min"),
)

OPTIONS_BY_KEY: Mapping[str, Option] = MappingProxyType({o.key: o for o in OPTIONS})

_DURATION_UNITS = {
    "ns": 1e-9, "nano": 1e-9, "nanos": 1e-9, "nanosecond": 1e-9, "nanoseconds": 1e-9,
    "us": 1e-6, "micro": 1e-6, "micros": 1e-6, "microsecond": 1e-6, "microseconds": 1e-6,
    "ms": 1e-3, "milli": 1e-3, "millis": 1e-3, "millisecond": 1e-3, "milliseconds": 1e-3,
    "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0,
    "m": 60.0, "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0,
    "h": 3600.0, "hour": 3600.0, "hours": 3600.0,
    "d": 86400.0, "day": 86400.0, "days": 86400.0,
}
_SIZE_UNITS = {"b": 1, "bytes": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
               "g": 1 << 30, "gb": 1 << 30, "t": 1 << 40, "tb": 1 << 40}
_NUMBER_WITH_UNIT = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")
_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


def parse_duration(text: str | int | float) -> float:
    """`500ms`, `4s`, `1min`, `2h` → seconds; a bare number is milliseconds, as in Flink."""
    if isinstance(text, bool):
        raise ValueError(f"{text!r} is not a duration")
    if isinstance(text, (int, float)):
        return float(text) / 1000.0
    match = _NUMBER_WITH_UNIT.match(str(text))
    if not match:
        raise ValueError(f"{text!r} is not a duration (write it as 500ms, 4s, 1min, 2h)")
    number, unit = float(match.group(1)), match.group(2).lower()
    if not unit:
        return number / 1000.0
    if unit not in _DURATION_UNITS:
        raise ValueError(f"{text!r} has an unknown time unit {unit!r} (use ms, s, min, h or d)")
    return number * _DURATION_UNITS[unit]


def parse_size(text: str | int) -> int:
    """`10mb`, `64kb`, `1g` → bytes (powers of 1024); a bare number is bytes."""
    if isinstance(text, bool):
        raise ValueError(f"{text!r} is not a size")
    if isinstance(text, int):
        return text
    match = _NUMBER_WITH_UNIT.match(str(text))
    if not match:
        raise ValueError(f"{text!r} is not a size (write it as 512kb, 10mb, 1gb)")
    number, unit = float(match.group(1)), match.group(2).lower() or "b"
    if unit not in _SIZE_UNITS:
        raise ValueError(f"{text!r} has an unknown size unit {unit!r} (use b, kb, mb, gb or tb)")
    return int(number * _SIZE_UNITS[unit])


def format_duration(seconds: float) -> str:
    """The inverse of `parse_duration`, in the largest unit that keeps the value whole."""
    ms = round(seconds * 1000)
    for unit, factor in (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000)):
        if ms and ms % factor == 0:
            return f"{ms // factor}{unit}"
    return f"{ms}ms"


def _convert(option: Option, raw: Any) -> Any:
    kind = option.kind
    if kind == "str":
        value: Any = "" if raw is None else str(raw)
    elif kind == "bool":
        if isinstance(raw, bool):
            value = raw
        elif str(raw).strip().lower() in _TRUE | _FALSE:
            value = str(raw).strip().lower() in _TRUE
        else:
            raise ValueError(f"{raw!r} is not true or false")
    elif kind == "int":
        if isinstance(raw, bool) or not re.fullmatch(r"\s*-?[0-9]+\s*", str(raw)):
            raise ValueError(f"{raw!r} is not a whole number")
        value = int(raw)
    elif kind == "float":
        try:
            value = float(raw)
        except (TypeError, ValueError):
            raise ValueError(f"{raw!r} is not a number") from None
    elif kind == "duration":
        value = parse_duration(raw)
    elif kind == "size":
        value = parse_size(raw)
    elif kind == "choice":
        value = str(raw).strip()
        if value not in option.choices:
            raise ValueError(f"{raw!r} is not one of {', '.join(option.choices)}")
    else:  # pragma: no cover - a programming error in OPTIONS
        raise AssertionError(f"unknown option kind {kind}")
    if option.minimum is not None and isinstance(value, (int, float)) and value < option.minimum:
        raise ValueError(f"{raw!r} is below the minimum {option.minimum:g}")
    return value


class Configuration(Mapping[str, Any]):
    """A frozen, validated view of every configuration key.

    `config["heartbeat.interval"]` is a float of seconds; keys not set have their default.
    Build it with `Configuration.load(...)` or `Configuration.from_mapping(...)`.
    """

    __slots__ = ("_values", "_spark")

    def __init__(self, values: Mapping[str, Any], spark: Mapping[str, str]) -> None:
        self._values = MappingProxyType(dict(values))
        self._spark = MappingProxyType(dict(spark))

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any] | None = None) -> Configuration:
        """Validate `raw` (flat dotted keys) and fill in defaults."""
        values = {o.key: o.default for o in OPTIONS}
        spark: dict[str, str] = {}
        problems: list[str] = []
        for key, value in (raw or {}).items():
            key = str(key).strip()
            option = OPTIONS_BY_KEY.get(key)
            if option is None:
                if key.startswith(SPARK_PREFIX) and len(key) > len(SPARK_PREFIX):
                    spark[key] = "" if value is None else str(value)
                    continue
                hint = _closest_key(key)
                problems.append(f"unknown configuration key {key!r}" + (f" (did you mean {hint!r}?)" if hint else ""))
                continue
            try:
                values[key] = _convert(option, value)
            except ValueError as exc:
                problems.append(f"bad value for {key!r}: {exc}")
        if problems:
            raise ConfigurationError(problems[0], details=problems[1:])
        return cls(values, spark)

    @classmethod
    def load(cls, path: str | os.PathLike[str] | None = None, overrides: Iterable[str] | Mapping[str, Any] = (),
             *, environ: Mapping[str, str] | None = None) -> Configuration:
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

    def __getitem__(self, key: str) -> Any:
        if key in self._values:
            return self._values[key]
        if key in self._spark:
            return self._spark[key]
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        yield from self._values
        yield from self._spark

    def __len__(self) -> int:
        return len(self._values) + len(self._spark)

    def __repr__(self) -> str:
        changed = {k: v for k, v in self.to_flat().items() if k != "rest.auth.token"}
        return f"Configuration({changed})"

    @property
    def auth_token(self) -> str:
        """The REST token: `rest.auth.token`, else `rest.auth.token-file`'s content, else
        `$SPARKDISPATCH_AUTH_TOKEN`; empty for none. `ConfigurationError` if the file cannot be read."""
        if self["rest.auth.token"]:
            return str(self["rest.auth.token"])
        if path := self["rest.auth.token-file"]:
            try:
                token = Path(os.path.expanduser(path)).read_text().strip()
            except OSError as exc:
                raise ConfigurationError(f"rest.auth.token-file {path!r} cannot be read: {exc.strerror or exc}") \
                    from None
            if not token:
                raise ConfigurationError(f"rest.auth.token-file {path!r} is empty: write the token in it")
            return token
        return os.environ.get(TOKEN_ENV_VAR, "").strip()

    @property
    def spark_properties(self) -> Mapping[str, str]:
        """Spark properties (`spark.*` keys other than `spark.master`)."""
        return self._spark

    @property
    def storage_dir(self) -> Path:
        return Path(os.path.expanduser(self["storage.dir"]))

    @property
    def results_dir(self) -> str:
        return self["storage.results-dir"] or str(self.storage_dir / "results")

    @property
    def rest_url(self) -> str:
        """The advertised `http(s)://address:port` of the REST endpoint (https with `rest.ssl.enabled`)."""
        return f"{self.rest_scheme}://{self['rest.address']}:{self['rest.port']}"

    @property
    def rest_scheme(self) -> str:
        return "https" if self["rest.ssl.enabled"] else "http"

    def to_flat(self) -> dict[str, str]:
        """Every key that differs from its default, as strings `-D` or a YAML file accept."""
        flat: dict[str, str] = {}
        for option in OPTIONS:
            value = self._values[option.key]
            if value == option.default:
                continue
            flat[option.key] = _format(option, value)
        flat.update(self._spark)
        return flat

    def to_overrides(self) -> list[str]:
        """`-D` arguments that rebuild this configuration in a child process."""
        args: list[str] = []
        for key, value in self.to_flat().items():
            args += ["-D", f"{key}={value}"]
        return args


def _format(option: Option, value: Any) -> str:
    if option.kind == "duration":
        return format_duration(value)
    if option.kind == "bool":
        return "true" if value else "false"
    return str(value)


def _closest_key(key: str) -> str | None:
    import difflib

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
            raise ConfigurationError(f"configuration key {key!r} in {path} must have a single value; write "
                                     "nested keys flat, as `a.b.c: value`")
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


def restart_strategy_from_config(config: Configuration) -> RestartStrategy:
    """The `restart-strategy.*` configuration as a strategy value."""
    kind = config["restart-strategy.type"]
    if kind == "fixed-delay":
        return FixedDelayRestart(attempts=config["restart-strategy.fixed-delay.attempts"],
                                 delay_s=config["restart-strategy.fixed-delay.delay"])
    if kind == "exponential-delay":
        prefix = "restart-strategy.exponential-delay."
        return ExponentialDelayRestart(
            initial_backoff_s=config[prefix + "initial-backoff"], max_backoff_s=config[prefix + "max-backoff"],
            backoff_multiplier=config[prefix + "backoff-multiplier"],
            reset_backoff_threshold_s=config[prefix + "reset-backoff-threshold"],
            jitter_factor=config[prefix + "jitter-factor"], attempts=config[prefix + "attempts"])
    if kind == "failure-rate":
        prefix = "restart-strategy.failure-rate."
        return FailureRateRestart(max_failures_per_interval=config[prefix + "max-failures-per-interval"],
                                  failure_rate_interval_s=config[prefix + "failure-rate-interval"],
                                  delay_s=config[prefix + "delay"])
    return NoRestart()


def options_table() -> str:
    """The Markdown table of every key, its default and what it does (docs/configuration.md)."""
    rows = ["| key | default | description |", "| --- | --- | --- |"]
    for option in OPTIONS:
        default = option.default_doc or _format(option, option.default)
        if option.kind == "choice":
            default = f"{default} (one of {', '.join('`' + c + '`' for c in option.choices)})"
        rows.append(f"| `{option.key}` | {default or '(empty)'} | {option.description} |")
    rows.append("| `spark.*` | (none) | Any other `spark.` key is a Spark property of the TaskExecutors' "
                "Spark Connect servers, e.g. `spark.executor.memory: 2g`, `spark.sql.shuffle.partitions: 8`. "
                "A job sets its own runtime settings in its JobGraph's `config`. |")
    return "\n".join(rows) + "\n"
