"""A TaskExecutor's warm Spark Connect server: the one Spark driver its slot processes share.

`ConnectServer.start()` runs pyspark's own `spark-submit … SparkConnectServer` (the wheel ships
the jar) in a process group of its own, bound to 127.0.0.1, waits until it serves, and warms it
with representative work in a short-lived client process, so that neither the first task pays
for the JVM's class loading and code generation nor the TaskExecutor process for the Connect
client's imports (pandas, pyarrow). `stop()` ends the whole group, Spark's Python workers
included. Whether and when to restart a dead server is the TaskExecutor's decision.

The server (and its warm-up client) is started through `sparkdispatch.lifeline`, so it gets
SIGTERM when the thread that started it ends, also when the TaskExecutor is killed with SIGKILL:
start it from the main thread (or another thread that lives as long as the TaskExecutor).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import grpc  # type: ignore[import-untyped]  # grpcio ships no type stubs

from sparkdispatch.errors import ConnectServerError
from sparkdispatch.lifeline import tied_to_parent
from sparkdispatch.storage.private import write_private
from sparkdispatch.taskexecutor.connect_url import TOKEN_PROPERTY, call_metadata, grpc_target, server_url, shown
from sparkdispatch.taskexecutor.job_environment import job_environment
from sparkdispatch.taskexecutor.process_usage import ProcessUsage
from sparkdispatch.taskexecutor.settings import ConnectServerSettings, is_local_master
from sparkdispatch.taskexecutor.worker_daemons import DAEMON_MODULE_PROPERTY, ServerAdditions, WorkerDaemonTemplate

log = logging.getLogger(__name__)

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
LOG_FILE_NAME = "connect-server.log"  # in the work dir; the previous start's log is kept as `.1`
#: The server's Spark properties, in the work dir (0600) from its spawn until it serves: a `spark.*`
#: secret on `--conf` would be on the JVM's command line, which every user of the host may read.
PROPERTIES_FILE_NAME = "spark-server.properties"
STOP_GRACE_S = 10.0  # SIGTERM lets Spark delete its temp dirs (0.5-3 s measured); SIGKILL after this
BIND_ADDRESS_KEY = "spark.connect.grpc.binding.address"
BIND_PORT_KEY = "spark.connect.grpc.binding.port"
WARM_UP_MODULE = "sparkdispatch.taskexecutor.connect_server"

_READY_LINE = re.compile(r"Spark Connect server started at: (\S+:\d+)")
_UI_LINE = re.compile(r"Successfully started service 'SparkUI' on port (\d+)")
_TAIL_LINES = 20
_STACK_FRAME = re.compile(r"\s+(at |\.\.\. \d+ more)")
_MIB = 1 << 20

# The root logger at WARN as in a classic PySpark driver (the Connect server logs every plan at
# INFO), with the lines start() reads kept at INFO. The thread name is how a slot process finds
# its attempt's lines (driver_log.py).
_LOG4J2_PROPERTIES = """\
rootLogger.level = warn
rootLogger.appenderRef.stdout.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1} [%t]: %m%n%ex
logger.connect.name = org.apache.spark.sql.connect.service.SparkConnectServer
logger.connect.level = info
logger.ports.name = org.apache.spark.util.Utils
logger.ports.level = info
logger.jetty.name = org.sparkproject.jetty.util.component.AbstractLifeCycle
logger.jetty.level = error
logger.parquet.name = org.apache.parquet.CorruptStatistics
logger.parquet.level = error
"""

# A Connect session cannot pick a scheduler pool, so the per-slot pools of the classic session are
# gone; a FAIR default pool still shares the cores between the concurrent jobs of all slots
# (Spark's own default pool is FIFO).
_FAIR_SCHEDULER_XML = """\
<?xml version="1.0"?>
<allocations>
  <pool name="default"><schedulingMode>FAIR</schedulingMode><weight>1</weight><minShare>0</minShare></pool>
</allocations>
"""


def server_properties(settings: ConnectServerSettings, *, work_dir: Path, port: int) -> dict[str, str]:
    """The server's Spark properties: our defaults, then the configured `spark.*` ones, then its binding."""
    properties: dict[str, str] = {}
    if not is_local_master(settings.spark_master):
        # Spark 4 binds its UI where it binds the driver (SPARK_LOCAL_IP, else every interface), and a
        # cluster's executors must reach the driver: the UI cannot keep to loopback, so it is off unless asked
        properties["spark.ui.enabled"] = "false"
    properties |= {
        # a progress bar redrawn in a log file only buries the lines that matter
        "spark.ui.showConsoleProgress": "false",
        # any free port: several TaskExecutors on one host never queue up behind 4040
        "spark.ui.port": "0",
        "spark.driver.memory": f"{max(1, settings.driver_memory // _MIB)}m",
        "spark.scheduler.mode": "FAIR",
        "spark.scheduler.allocation.file": str(work_dir / "fairscheduler.xml"),
        "spark.local.dir": str(work_dir / "local"),
        "spark.sql.warehouse.dir": str(work_dir / "warehouse"),
    }
    properties.update(settings.spark_properties)
    ignored = sorted(key for key in (BIND_ADDRESS_KEY, BIND_PORT_KEY) if key in settings.spark_properties)
    if ignored:
        log.warning(
            "ignoring %s: the Spark Connect server binds 127.0.0.1 and `taskexecutor.connect.port`", ", ".join(ignored)
        )
    properties.update({BIND_ADDRESS_KEY: "127.0.0.1", BIND_PORT_KEY: str(port)})
    return properties


def properties_text(properties: dict[str, str]) -> str:
    """`properties` as a Java properties file Spark reads (`--properties-file`): `key=value` lines,
    escaped so that every key and value reads back as given (Spark trims values' outer spaces)."""
    return "".join(f"{_escape(key, key=True)}={_escape(value, key=False)}\n" for key, value in properties.items())


def _escape(text: str, *, key: bool) -> str:
    escaped = []
    for char in text:
        if char in _PROPERTIES_ESCAPES:
            escaped.append(_PROPERTIES_ESCAPES[char])
        elif key and char in " =:#!":
            escaped.append("\\" + char)
        elif " " <= char <= "~":
            escaped.append(char)
        else:  # \uXXXX, as UTF-16 code units, reads the same whatever charset the file is read with
            data = char.encode("utf-16-be")
            escaped.extend(f"\\u{int.from_bytes(data[i : i + 2], 'big'):04x}" for i in range(0, len(data), 2))
    return "".join(escaped)


_PROPERTIES_ESCAPES = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\f": "\\f"}


def server_environment(settings: ConnectServerSettings) -> dict[str, str]:
    """What the server's environment adds to the TaskExecutor's (`job_environment`): with a local
    master, `SPARK_LOCAL_IP=127.0.0.1` (unless the TaskExecutor has one), the only setting Spark 4's
    UI binds by, which also keeps the driver's own ports on loopback."""
    if is_local_master(settings.spark_master) and "SPARK_LOCAL_IP" not in os.environ:
        return {"SPARK_LOCAL_IP": "127.0.0.1"}
    return {}


class ConnectServer:
    """One Spark Connect server process, started, health-checked and stopped by its TaskExecutor.

    `start()` and `stop()` may be called from different threads; `is_healthy()` from any.
    """

    def __init__(
        self,
        settings: ConnectServerSettings,
        *,
        work_dir: Path,
        app_name: str = "sparkdispatch-taskexecutor",
        daemon_template: WorkerDaemonTemplate | None = None,
    ) -> None:
        self.settings = settings
        #: the template Spark's Python worker daemons are forked from (local masters only), if any
        self.daemon_template = daemon_template if is_local_master(settings.spark_master) else None
        self.work_dir = work_dir.absolute()
        self.app_name = app_name
        self.log_path = self.work_dir / LOG_FILE_NAME
        self.ui_port: int | None = None  # the Spark UI's port while serving (None when it is disabled)
        self.starts = 0  # starts asked for; each one after the first is a restart
        #: what the server held right after its latest start and warm-up (None if /proc could not tell)
        self.warm_usage: ProcessUsage | None = None
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._address: str | None = None  # "127.0.0.1:<port>" while serving
        self._token = ""  # the token clients must send, new at each start (connect_url.py)
        self._port = settings.port  # once bound, a restart asks for the same port again

    @property
    def url(self) -> str:
        """`sc://localhost:<port>/;token=<token>`, what Connect clients use (set once serving; a
        credential: log `connect_url.shown(url)`)."""
        url = self.serving_url
        if url is None:
            raise ConnectServerError("the Spark Connect server is not serving", log_file=str(self.log_path))
        return url

    @property
    def serving_url(self) -> str | None:
        """`url`, or None while the server does not serve."""
        return None if self._address is None else server_url(self._port, self._token)

    @property
    def pid(self) -> int | None:
        """The server's process id, also its process group id; None when it was never started or is stopped."""
        process = self._process
        return None if process is None else process.pid

    def is_alive(self) -> bool:
        """Whether the server process runs (it may still be starting, or no longer answer)."""
        process = self._process
        return process is not None and process.poll() is None

    def is_healthy(self, timeout: float = 2.0) -> bool:
        """Whether the server answers a gRPC call within `timeout` seconds (a few ms when it does).

        The call releases a random session id: it needs no Connect client, creates nothing on the
        server and logs nothing there.
        """
        address, url = self._address, self.serving_url
        if address is None or url is None or not self.is_alive():
            return False
        try:
            with grpc.insecure_channel(address, options=[("grpc.enable_http_proxy", 0)]) as channel:
                channel.unary_unary(_RELEASE_SESSION_METHOD)(
                    _release_session_request(str(uuid.uuid4()), _HEALTH_CHECK_USER),
                    timeout=timeout,
                    metadata=call_metadata(url),
                )
        except grpc.RpcError as exc:
            log.debug("Spark Connect server at %s did not answer: %s", address, exc)
            return False
        return True

    def start(self, timeout: float | None = None) -> None:
        """Spawn the server, wait until it serves and warm it, within `timeout` seconds.

        `timeout` defaults to `taskexecutor.connect.start-timeout`. Raises `ConnectServerError`
        naming the log file when the server exits, does not serve in time or fails its warm-up;
        a failed start leaves no process behind.
        """
        budget = self.settings.start_timeout if timeout is None else timeout
        with self._lock:
            if self._process is not None:
                raise ConnectServerError(
                    f"the Spark Connect server was started already (pid {self._process.pid})",
                    log_file=str(self.log_path),
                )
            started = time.monotonic()
            deadline = started + budget
            self.starts += 1
            self._spawn()
            try:
                self._wait_until_serving(deadline, budget)
                self._remove_properties()  # read at the JVM's start, needed no more
                serving = time.monotonic()
                self._warm_up(deadline, budget)
            except BaseException:
                self._terminate()
                raise
            self.warm_usage = ProcessUsage.of(self.pid) if self.pid is not None else None
            log.info(
                "Spark Connect server ready at %s in %.1f s (warm-up %.1f s; pid %d, Spark UI port %s, log %s)",
                shown(self.url),
                time.monotonic() - started,
                time.monotonic() - serving,
                self.pid,
                self.ui_port,
                self.log_path,
            )

    def stop(self) -> None:
        """SIGTERM the server's process group, SIGKILL it after `STOP_GRACE_S`; idempotent."""
        with self._lock:
            self._terminate()

    def restart(self, timeout: float | None = None) -> None:
        """Stop the server if it still runs and start a new one, on the same port if it is free."""
        with self._lock:
            self._terminate()
        self.start(timeout)

    def _worker_daemon_additions(self) -> ServerAdditions:
        """What using the worker-daemon template adds to this start: nothing without a live template,
        or when the configuration names a daemon module of its own."""
        template = self.daemon_template
        if template is None or DAEMON_MODULE_PROPERTY in self.settings.spark_properties or not template.alive():
            return ServerAdditions(properties={}, environment={})
        return template.server_additions(dict(os.environ))

    def _spawn(self) -> None:
        home = _spark_home(self.log_path)
        (self.work_dir / "local").mkdir(parents=True, exist_ok=True)
        log4j = self.work_dir / "log4j2.properties"
        log4j.write_text(_LOG4J2_PROPERTIES)
        (self.work_dir / "fairscheduler.xml").write_text(_FAIR_SCHEDULER_XML)
        if self.log_path.exists():
            self.log_path.replace(self.log_path.with_name(LOG_FILE_NAME + ".1"))
        properties = self.work_dir / PROPERTIES_FILE_NAME
        if TOKEN_PROPERTY in self.settings.spark_properties:
            log.warning("ignoring %s: the TaskExecutor makes a token of its own at each start", TOKEN_PROPERTY)
        self._token = secrets.token_hex(32)
        spark_properties = server_properties(self.settings, work_dir=self.work_dir, port=self._port)
        additions = self._worker_daemon_additions()
        spark_properties |= additions.properties
        write_private(properties, properties_text(spark_properties | {TOKEN_PROPERTY: self._token}).encode())
        argv = [
            str(home / "bin" / "spark-submit"),
            "--class",
            SERVER_CLASS,
            "--master",
            self.settings.spark_master,
            "--name",
            self.app_name,
            "--properties-file",
            str(properties),
            # spark-defaults.conf (of SPARK_CONF_DIR, if any) as without a properties file; ours take precedence
            "--load-spark-defaults",
            "spark-internal",
        ]
        submit_opts = os.environ.get("SPARK_SUBMIT_OPTS", "")
        if "log4j2.configurationFile" not in submit_opts:
            submit_opts = f"{submit_opts} -Dlog4j2.configurationFile={log4j.as_uri()}".strip()
        # Python workers must run this interpreter: it has pyarrow (4.3's Python UDFs use Arrow) and
        # cloudpickle needs the clients' Python version. SPARK_HOME: the jars of the installed client.
        env = job_environment(
            {
                "SPARK_HOME": str(home),
                "PYSPARK_PYTHON": sys.executable,
                "SPARK_SUBMIT_OPTS": submit_opts,
                **server_environment(self.settings),
                **additions.environment,
            }
        )
        try:
            with open(self.log_path, "wb") as log_file:
                self._process = subprocess.Popen(
                    tied_to_parent(argv, signal.SIGTERM),
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                )
        except OSError as exc:
            raise ConnectServerError(
                f"cannot start the Spark Connect server: {exc}", log_file=str(self.log_path)
            ) from exc
        log.info(
            "starting the Spark Connect server (pid %d, master %s), log %s",
            self._process.pid,
            self.settings.spark_master,
            self.log_path,
        )

    def _wait_until_serving(self, deadline: float, budget: float) -> None:
        process = self._process
        assert process is not None
        pending = b""
        with open(self.log_path, "rb") as log_file:
            while self._address is None:
                chunk = log_file.read()
                if chunk:
                    *lines, pending = (pending + chunk).split(b"\n")
                    for line in lines:
                        self._read_start_line(line.decode(errors="replace"))
                elif process.poll() is not None:
                    raise self._failure(
                        f"the Spark Connect server (master {self.settings.spark_master}) exited "
                        f"with code {process.returncode} before it served"
                    )
                elif time.monotonic() > deadline:
                    raise self._failure(f"the Spark Connect server did not start within {budget:g} s")
                else:
                    time.sleep(0.1)
        # the log line comes once the port is bound; a real call proves that it answers
        while not self.is_healthy(timeout=max(0.1, min(2.0, deadline - time.monotonic()))):
            if process.poll() is not None:
                raise self._failure(
                    f"the Spark Connect server exited with code {process.returncode} before it answered"
                )
            if time.monotonic() > deadline:
                raise self._failure(f"the Spark Connect server did not answer within {budget:g} s")
            time.sleep(0.1)

    def _read_start_line(self, line: str) -> None:
        if (ui := _UI_LINE.search(line)) is not None:
            self.ui_port = int(ui.group(1))
        if (ready := _READY_LINE.search(line)) is not None:
            self._address = ready.group(1)
            self._port = int(self._address.rpartition(":")[2])

    def _warm_up(self, deadline: float, budget: float) -> None:
        """Run representative work in a short-lived Connect client, so the first task finds the server warm."""
        directory = self.work_dir / "warm-up" / uuid.uuid4().hex
        argv = [sys.executable, "-m", WARM_UP_MODULE, str(directory)]
        try:
            done = subprocess.run(  # the URL on stdin: its token must not be on a command line
                tied_to_parent(argv, signal.SIGTERM),
                input=self.url + "\n",
                capture_output=True,
                text=True,
                timeout=max(0.1, deadline - time.monotonic()),
            )
        except subprocess.TimeoutExpired:
            raise self._failure(f"the Spark Connect server did not finish its warm-up within {budget:g} s") from None
        finally:
            shutil.rmtree(directory.parent, ignore_errors=True)
        if done.returncode != 0:
            errors = [line for line in done.stderr.splitlines() if line.strip()]
            raise self._failure(
                f"the Spark Connect server failed its warm-up: "
                f"{errors[-1] if errors else f'exit code {done.returncode}'}"
            )

    def _remove_properties(self) -> None:
        (self.work_dir / PROPERTIES_FILE_NAME).unlink(missing_ok=True)

    def _terminate(self) -> None:
        process, self._process, self._address, self.ui_port = self._process, None, None, None
        self._remove_properties()
        if process is None:
            return
        _signal_group(process.pid, signal.SIGTERM)
        try:
            process.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            log.warning(
                "the Spark Connect server (pid %d) did not stop within %g s; killing it", process.pid, STOP_GRACE_S
            )
            _signal_group(process.pid, signal.SIGKILL)
            process.wait()
        _signal_group(process.pid, signal.SIGKILL)  # Python workers it may have left behind
        log.info("Spark Connect server (pid %d) stopped with exit code %s", process.pid, process.returncode)

    def _failure(self, reason: str) -> ConnectServerError:
        return ConnectServerError(
            f"{reason}; its log is {self.log_path}", log_file=str(self.log_path), details=_tail(self.log_path)
        )


def _spark_home(log_path: Path) -> Path:
    """pyspark's package directory: Spark's jars and `bin/spark-submit` (found without importing pyspark)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise ConnectServerError(f"pyspark is not installed for {sys.executable}", log_file=str(log_path))
    return Path(spec.origin).parent


def _signal_group(pgid: int, signum: signal.Signals) -> None:
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        pass


def _tail(path: Path, lines: int = _TAIL_LINES) -> list[str]:
    """The last `lines` lines of a log file without Java stack frames (empty when it cannot be read)."""
    try:
        with open(path, "rb") as file:
            file.seek(max(0, file.seek(0, os.SEEK_END) - 64 * 1024))
            text = file.read().decode(errors="replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if line.strip() and not _STACK_FRAME.match(line)][-lines:]


_RELEASE_SESSION_METHOD = "/spark.connect.SparkConnectService/ReleaseSession"
_INTERRUPT_METHOD = "/spark.connect.SparkConnectService/Interrupt"
_HEALTH_CHECK_USER = "sparkdispatch-health-check"
_INTERRUPT_TYPE_ALL = 1


def release_session(connect_url: str, session_id: str, user_id: str, *, timeout: float = 5.0) -> bool:
    """Interrupt every operation of a session on the server at `connect_url` (with its token) and
    release it, with grpc alone: what is left of a slot process that was killed. False when the
    server did not answer (it forgets the session after its own timeout)."""
    address, metadata = grpc_target(connect_url), call_metadata(connect_url)
    try:
        with grpc.insecure_channel(address, options=[("grpc.enable_http_proxy", 0)]) as channel:
            channel.unary_unary(_INTERRUPT_METHOD)(
                _interrupt_all_request(session_id, user_id), timeout=timeout, metadata=metadata
            )
            channel.unary_unary(_RELEASE_SESSION_METHOD)(
                _release_session_request(session_id, user_id), timeout=timeout, metadata=metadata
            )
    except grpc.RpcError as exc:
        log.warning("could not release Spark Connect session %s on %s: %s", session_id, address, exc)
        return False
    log.info("released Spark Connect session %s on %s", session_id, address)
    return True


def _release_session_request(session_id: str, user_id: str) -> bytes:
    """A serialized `spark.connect.ReleaseSessionRequest{session_id=1, user_context=2{user_id=1}}`.

    Written by hand so that a health check needs grpc alone: importing pyspark's generated protos
    imports pandas and pyarrow (0.8 s). Fields 1 and 2 of both messages are stable since Spark 3.5.
    """
    return _length_delimited(1, session_id.encode()) + _length_delimited(2, _length_delimited(1, user_id.encode()))


def _interrupt_all_request(session_id: str, user_id: str) -> bytes:
    """A serialized `spark.connect.InterruptRequest{session_id=1, user_context=2{user_id=1},
    interrupt_type=4: INTERRUPT_TYPE_ALL}`."""
    return (
        _length_delimited(1, session_id.encode())
        + _length_delimited(2, _length_delimited(1, user_id.encode()))
        + _varint(4 << 3)
        + _varint(_INTERRUPT_TYPE_ALL)
    )


def _length_delimited(field_number: int, payload: bytes) -> bytes:
    """One protobuf field of wire type 2 (string, bytes, message): tag, length, payload."""
    return _varint(field_number << 3 | 2) + _varint(len(payload)) + payload


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _warm_up(url: str, directory: str, *, rounds: int = 3) -> None:
    """A small job shaped like real tasks (generate, filter, aggregate, write Parquet, read it back).

    Several rounds: the JVM compiles the hot paths only after they ran a few times (measured on the
    sales pipeline: its first job took 2-3x the steady state after one round, about 1.3x after three).
    """
    from pyspark.sql import Observation, SparkSession
    from pyspark.sql import functions as F

    spark = SparkSession.builder.remote(url).create()
    try:
        for round_index in range(rounds):
            order = F.col("id")
            orders = spark.range(10_000).select(
                order.alias("order_id"),
                F.element_at(
                    F.array(*[F.lit(r) for r in ("north", "south", "east", "west")]), (order % 4 + 1).cast("int")
                ).alias("region"),
                ((order * 13) % 9 - 1).cast("int").alias("quantity"),
                F.round(F.lit(5.0) + (order * 31) % 100 / 4, 2).alias("unit_price"),
            )
            revenue = (
                orders.where(F.col("quantity") > 0)
                .withColumn("revenue", F.round(F.col("quantity") * F.col("unit_price"), 2))
                .groupBy("region")
                .agg(F.sum("revenue").alias("revenue"), F.count("*").alias("orders"))
            )
            rows = Observation(f"rows-{round_index}")
            path = f"{directory}/{round_index}"
            revenue.observe(rows, F.count(F.lit(1)).alias("n")).write.mode("overwrite").parquet(path)
            back = spark.read.parquet(path).orderBy(F.col("revenue").desc()).collect()
            local = spark.createDataFrame([(1, "a"), (2, "b")], ["k", "v"]).collect()
            if len(back) != 4 or rows.get["n"] != 4 or len(local) != 2:
                raise RuntimeError(f"unexpected warm-up results: {back}, {rows.get}, {local}")
    finally:
        spark.stop()


if __name__ == "__main__":
    _warm_up(sys.stdin.readline().strip(), sys.argv[1])
