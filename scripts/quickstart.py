"""The README's main job: a standalone cluster, the example pipeline DAG run through Airflow, its JobResult.

Starts `sparkdispatch standalone` (one TaskExecutor, warm local Spark), runs the DAG
`sparkdispatch_sales_pipeline` from dags/ with `airflow dags test` against it, prints the
JobResult of the job the DAG ran, and stops every process it started. Exits 0 only if that job
FINISHED.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sparkdispatch.client import RetryPolicy, SyncSparkDispatchClient
from sparkdispatch.errors import SparkDispatchError
from sparkdispatch.model.states import JobStatus

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
DAG_ID = "sparkdispatch_sales_pipeline"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_cluster(
    client: SyncSparkDispatchClient, cluster: subprocess.Popen[bytes], log: Path, timeout: float = 240.0
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cluster.poll() is not None:
            raise SystemExit(f"the standalone cluster exited; see {log}")
        try:
            if client.overview().taskmanagers >= 1:
                return
        except SparkDispatchError:
            pass  # not listening yet
        time.sleep(0.5)
    raise SystemExit(f"the standalone cluster did not get a TaskExecutor within {timeout:.0f}s; see {log}")


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="sparkdispatch-quickstart-"))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "SPARK_LOCAL_IP": "127.0.0.1"}
    log = work / "standalone.log"
    print(f"starting a standalone cluster on {base} (logs in {work})", flush=True)
    started = time.monotonic()
    with open(log, "wb") as out:
        cluster = subprocess.Popen(
            [
                str(BIN / "sparkdispatch"),
                "-D",
                f"rest.port={port}",
                "standalone",
                "--storage",
                str(work / "storage"),
                "--slots",
                "2",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    # one try per call: wait_for_cluster does the waiting
    client = SyncSparkDispatchClient.create(addresses=[base], retry=RetryPolicy(attempts=1), request_timeout=10.0)
    try:
        wait_for_cluster(client, cluster, log)
        print(f"cluster ready in {time.monotonic() - started:.1f}s; running the DAG {DAG_ID} with Airflow", flush=True)
        airflow_env = {
            **env,
            "AIRFLOW_HOME": str(work / "airflow"),
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW_CONN_SPARKDISPATCH_DEFAULT": json.dumps(
                {"conn_type": "sparkdispatch", "host": "127.0.0.1", "port": port}
            ),
        }
        subprocess.run([str(BIN / "airflow"), "db", "migrate"], env=airflow_env, check=True, stdout=subprocess.DEVNULL)
        dag_run = subprocess.run([str(BIN / "airflow"), "dags", "test", DAG_ID], env=airflow_env)
        jobs = client.jobs()
        if not jobs:
            print("the DAG submitted no job", file=sys.stderr)
            return 1
        statuses: list[JobStatus | None] = []
        for job in jobs:
            result = client.execution_result(job.id)
            if result is None:
                print(f"job {job.id} has no JobResult yet: it is {job.status.value}")
                statuses.append(None)
                continue
            print(json.dumps(result.to_dict(), indent=2))
            statuses.append(result.status)
        print(
            f"JobResult status: {', '.join(s.value if s else 'none' for s in statuses)}; "
            f"DAG run exit code {dag_run.returncode}; {time.monotonic() - started:.1f}s in all",
            flush=True,
        )
        return 0 if dag_run.returncode == 0 and all(s is JobStatus.FINISHED for s in statuses) else 1
    finally:
        os.killpg(cluster.pid, signal.SIGTERM)
        try:
            cluster.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(cluster.pid, signal.SIGKILL)
            cluster.wait()
        client.close()
        print("standalone cluster stopped", flush=True)


if __name__ == "__main__":
    sys.exit(main())
