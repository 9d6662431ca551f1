"""The whole master against real components: two masters under ZooKeeper HA, Redis, two Celery
TaskExecutors with warm local Spark, all as separate processes, driven over real HTTP."""

from __future__ import annotations

import concurrent.futures
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkdispatch.config import Configuration
from sparkdispatch.config.options import HA_CLUSTER_ID, HA_ZOOKEEPER_PATH_ROOT, HA_ZOOKEEPER_QUORUM
from sparkdispatch.model.job_result import JobResult
from sparkdispatch.testing.local_cluster import LocalCluster
from sparkdispatch.testing.services import RedisServer, ZooKeeperServer
from sparkdispatch.testing.waiting import eventually_blocking

pytestmark = pytest.mark.slow

TASKS = Path(__file__).with_name("job_tasks.py")


@pytest.fixture(scope="module")
def cluster(
    zookeeper_server: ZooKeeperServer, redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalCluster]:
    storage = tmp_path_factory.mktemp("cluster")
    config = Configuration.from_mapping(
        {
            "high-availability.mode": "zookeeper",
            "high-availability.zookeeper.quorum": zookeeper_server.hosts,
            "high-availability.zookeeper.path.root": f"/it-{uuid.uuid4().hex[:8]}",
            "high-availability.zookeeper.session-timeout": "4s",
            "storage.dir": str(storage),
            "broker.url": redis_server.url,
            "heartbeat.interval": "500ms",
            "heartbeat.timeout": "4s",
            "taskexecutor.slots": 2,
            "restart-strategy.fixed-delay.delay": "200ms",
            "cleanup-strategy.initial-backoff": "200ms",
            "cleanup-strategy.max-backoff": "1s",
            "rest.execution-result.long-poll": "200ms",
            "spark.sql.shuffle.partitions": "2",
            "spark.ui.enabled": "false",
        }
    )
    local = LocalCluster(config, masters=2, taskexecutors=2)
    local.start()
    try:
        yield local
    finally:
        local.stop()


@pytest.fixture(scope="module")
def tasks_key(cluster: LocalCluster) -> str:
    return cluster.upload_artifact(TASKS)


def vertex(vid: str, fn: str, *, inputs: tuple[str, ...] = (), parallelism: int = 1, **params: Any) -> dict[str, Any]:
    return {
        "id": vid,
        "entrypoint": f"job_tasks:{fn}",
        "parallelism": parallelism,
        "inputs": list(inputs),
        "params": params,
    }


def job(
    name: str, vertices: list[dict[str, Any]], key: str, *, results: str = "durable", **extra: Any
) -> dict[str, Any]:
    """A job of `vertices`. Durable results unless `results="auto"`: these tests are of tasks, their
    failover and the reuse of finished results, so each vertex runs as a task of its own."""
    return {"name": name, "vertices": vertices, "artifacts": [key], "results": results, **extra}


def runs(log_dir: Path, vertex_id: str, what: str = "run") -> list[str]:
    return sorted(p.name for p in log_dir.glob(f"{vertex_id}.*.{what}.*"))


def wait_for_run(log_dir: Path, vertex_id: str, what: str = "run", timeout: float = 120.0) -> None:
    """Wait until a subtask of `vertex_id` left its `what` marker."""
    eventually_blocking(
        lambda: runs(log_dir, vertex_id, what), f"{vertex_id} to reach {what!r}", timeout=timeout, interval=0.1
    )


def fan_in(name: str, key: str, log_dir: Path, *, results: str) -> dict[str, Any]:
    """numbers (2) fans out to double (2) and square (2), which fan in to total (1)."""
    log = str(log_dir)
    return job(
        name,
        [
            vertex("numbers", "numbers", parallelism=2, rows=100, log_dir=log),
            vertex("double", "double", inputs=("numbers",), parallelism=2, log_dir=log),
            vertex("square", "square", inputs=("numbers",), parallelism=2, log_dir=log),
            vertex("total", "total", inputs=("double", "square"), log_dir=log),
        ],
        key,
        results=results,
    )


def test_fan_out_fan_in_graph_produces_the_expected_rows(
    cluster: LocalCluster, tasks_key: str, tmp_path: Path, spark: Any
) -> None:
    graph = fan_in("fan-in", tasks_key, tmp_path, results="durable")
    result = cluster.wait_for_result(cluster.submit(graph))
    assert result.status == "FINISHED", result.failure
    rows = {vid: v.rows for vid, v in result.vertices.items()}
    assert rows == {"numbers": 100, "double": 100, "square": 100, "total": 1}
    assert all(v.attempts == 1 for v in result.vertices.values())
    total = spark.read.parquet(*result.vertices["total"].partitions).collect()
    assert [(r.doubled, r.squared) for r in total] == [(2 * sum(range(100)), sum(n * n for n in range(100)))]
    assert result.duration_ms == result.end_time - result.start_time


def test_the_master_chains_and_keeps_results_on_its_own_with_the_same_rows_and_nothing_durable_between(
    cluster: LocalCluster, tasks_key: str, tmp_path: Path, spark: Any
) -> None:
    """The fan-in graph above as the master plans it on its own (`"results": "auto"`): `numbers`,
    read by two vertices, is kept on its TaskExecutor; `double` and `square`, each read by `total`
    alone, run in `total`'s task as one plan. Two tasks instead of five, on one of the two
    TaskExecutors; the same report, every vertex with its rows and attempts, and no partition but the sink's."""
    cluster.wait_for_task_executors(2)
    graph = fan_in("fan-in-chained", tasks_key, tmp_path, results="auto")
    job_id = cluster.submit(graph)
    result = cluster.wait_for_result(job_id)
    assert result.status == "FINISHED", result.failure
    rows = {vid: v.rows for vid, v in result.vertices.items()}
    assert rows == {"numbers": 100, "double": 100, "square": 100, "total": 1}
    assert all(v.attempts == 1 for v in result.vertices.values())
    for between in ("numbers", "double", "square"):
        assert result.vertices[between].partitions == () and result.vertices[between].result_path is None
    total = spark.read.parquet(*result.vertices["total"].partitions).collect()
    assert [(r.doubled, r.squared) for r in total] == [(2 * sum(range(100)), sum(n * n for n in range(100)))]
    # each subtask's function ran once: numbers' too, though two vertices read its result
    assert len(runs(tmp_path, "numbers")) == 2 and len(runs(tmp_path, "double")) == 2
    assert len(runs(tmp_path, "total")) == 1
    # numbers' result was written beside it, read there by total's task, and released once read
    placed = task_executors_of(cluster, job_id)
    (site,) = placed["numbers"] | placed["total"]
    assert site is not None
    assert not list((cluster.config.storage_dir / "results" / job_id / "numbers").glob("*/*.parquet"))
    eventually_blocking(
        lambda: not kept_dir(cluster, site, job_id).exists(), "the kept result to be released", timeout=30
    )
    # a repair of total runs its task again, double and square with it, and numbers for them: its
    # kept result was deleted at the job's end
    repaired = repair(cluster, result, ["total"])
    assert repaired.status == "FINISHED", repaired.failure
    status, details = cluster.request("GET", f"{cluster.leader_url()}/jobs/{job_id}")
    assert status == 200 and details["repairs"][-1]["vertices"] == ["numbers", "double", "square", "total"]
    assert {vid: v.rows for vid, v in repaired.vertices.items()} == rows
    assert len(runs(tmp_path, "numbers")) == 4 and len(runs(tmp_path, "total")) == 2


def test_a_vertex_failing_twice_restarts_only_itself(cluster: LocalCluster, tasks_key: str, tmp_path: Path) -> None:
    log = str(tmp_path)
    graph = job(
        "flaky",
        [
            vertex("numbers", "numbers", rows=10, log_dir=log),
            vertex("flaky", "flaky", inputs=("numbers",), fail_attempts=2, log_dir=log),
        ],
        tasks_key,
        restart_strategy={"type": "fixed-delay", "attempts": 3, "delay_s": 0.1},
    )
    result = cluster.wait_for_result(cluster.submit(graph))
    assert result.status == "FINISHED", result.failure
    assert result.vertices["flaky"].attempts == 3
    assert result.vertices["numbers"].attempts == 1
    assert len(runs(tmp_path, "numbers")) == 1
    assert len(runs(tmp_path, "flaky")) == 3


def test_exhausted_restarts_fail_the_job_with_the_remote_traceback(cluster: LocalCluster, tasks_key: str) -> None:
    graph = job(
        "failing",
        [vertex("bad", "failing")],
        tasks_key,
        restart_strategy={"type": "fixed-delay", "attempts": 1, "delay_s": 0.05},
    )
    result = cluster.wait_for_result(cluster.submit(graph))
    assert result.status == "FAILED" and result.failure is not None
    assert result.failure.cls == "ValueError"
    assert "bad input row 42" in result.failure.message
    assert "job_tasks.py" in result.failure.traceback
    assert result.vertices["bad"].attempts == 2


def test_cancel_stops_running_spark_work_and_frees_the_slots(
    cluster: LocalCluster, tasks_key: str, tmp_path: Path
) -> None:
    job_id = cluster.submit(job("endless", [vertex("spin", "endless_spark", log_dir=str(tmp_path))], tasks_key))
    wait_for_run(tmp_path, "spin", "start")
    time.sleep(1.0)  # the scenario: its Spark job gets going (cancelled before, it stops all the same)
    status, _ = cluster.request("PATCH", f"{cluster.leader_url()}/jobs/{job_id}?mode=cancel", {})
    assert status == 202
    result = cluster.wait_for_result(job_id, timeout=60)
    assert result.status == "CANCELED"

    def slots_free() -> bool:
        overview = cluster.request("GET", cluster.leader_url() + "/overview")[1]
        return bool(overview["slots_available"] == overview["slots_total"])

    eventually_blocking(slots_free, "every slot free", interval=0.2)
    assert runs(tmp_path, "spin", "end") == []  # the Spark job was stopped, not left to finish
    status, body = cluster.request("PATCH", f"{cluster.leader_url()}/jobs/{job_id}?mode=cancel", {})
    assert status == 202, body  # cancelling a cancelled job is idempotent


def test_the_same_id_submitted_20_times_at_once_runs_once(
    cluster: LocalCluster, tasks_key: str, tmp_path: Path
) -> None:
    job_id = uuid.uuid4().hex
    graph = job("idempotent", [vertex("numbers", "numbers", rows=5, log_dir=str(tmp_path))], tasks_key, job_id=job_id)
    url = cluster.leader_url() + "/jobs"
    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        answers = list(pool.map(lambda _: cluster.request("POST", url, graph), range(20)))
    assert sorted(status for status, _ in answers) == [200] * 19 + [202]
    assert {body["job_id"] for _, body in answers} == {job_id}
    assert cluster.wait_for_result(job_id).status == "FINISHED"
    assert len(runs(tmp_path, "numbers")) == 1
    assert sum(1 for j in cluster.request("GET", cluster.leader_url() + "/jobs")[1]["jobs"] if j["id"] == job_id) == 1
    status, body = cluster.request("POST", url, graph)  # the same job again, after it ended: not run again
    assert status == 200 and body["job_id"] == job_id and body["status"] == "FINISHED"
    status, body = cluster.request("POST", url, {**graph, "name": "another"})
    assert status == 409 and "globally terminal" in body["errors"][0]
    assert len(runs(tmp_path, "numbers")) == 1


def test_fifty_concurrent_submissions_all_finish(cluster: LocalCluster, tasks_key: str) -> None:
    graph = job("many", [vertex("one", "nothing")], tasks_key)
    with concurrent.futures.ThreadPoolExecutor(10) as pool:
        job_ids = list(pool.map(lambda _: cluster.submit(graph), range(50)))
    assert len(set(job_ids)) == 50
    for job_id in job_ids:
        assert cluster.wait_for_result(job_id).status == "FINISHED"


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        (b"{not json", 400, "not valid JSON"),
        ({"name": "x", "vertices": []}, 400, "vertices"),
        (
            {
                "name": "x",
                "vertices": [
                    {"id": "a", "entrypoint": "m:f", "inputs": ["b"]},
                    {"id": "b", "entrypoint": "m:f", "inputs": ["a"]},
                ],
            },
            400,
            "cycle",
        ),
        ({"name": "x", "vertices": [{"id": "a", "entrypoint": "m:f", "inputs": ["ghost"]}]}, 400, "ghost"),
        ({"name": "x", "vertices": [{"id": "a", "entrypoint": "no-colon"}]}, 400, "entrypoint"),
        ({"name": "x", "vertices": [{"id": "a", "entrypoint": "m:f", "parallelism": 0}]}, 400, "parallelism"),
        (
            {"name": "x", "vertices": [{"id": "a", "entrypoint": "m:f"}, {"id": "a", "entrypoint": "m:g"}]},
            400,
            "duplicate",
        ),
        ({"name": "x" * 20_000_000, "vertices": []}, 413, "max-body-size"),
    ],
)
def test_malformed_graphs_are_refused_and_change_nothing(
    cluster: LocalCluster, body: Any, status: int, words: str
) -> None:
    leader = cluster.leader_url()
    before = cluster.request("GET", leader + "/jobs")[1]["jobs"]
    answer_status, answer = cluster.request("POST", leader + "/jobs", body)
    assert answer_status == status, answer
    assert any(words in message for message in answer["errors"]), answer
    assert cluster.request("GET", leader + "/jobs")[1]["jobs"] == before
    assert cluster.request("GET", leader + "/overview")[0] == 200


def test_a_standby_answers_overview_and_names_the_leader(cluster: LocalCluster) -> None:
    leader = cluster.wait_for_leader()
    standby = 1 - leader
    status, body = cluster.request("GET", cluster.master_url(standby) + "/overview")
    assert status == 200 and body["is_leader"] is False and body["leader"] == cluster.master_url(leader)
    status, body = cluster.request("GET", cluster.master_url(standby) + "/jobs")
    assert status == 503 and body["leader"] == cluster.master_url(leader)


def kill_the_task_executor_running(cluster: LocalCluster, job_id: str, vertex_id: str) -> int:
    """SIGKILL the TaskExecutor running `vertex_id`'s first subtask; its index, to start it again."""
    details = cluster.request("GET", f"{cluster.leader_url()}/jobs/{job_id}")[1]
    vertex_details = next(v for v in details["vertices"] if v["id"] == vertex_id)
    index = int(vertex_details["subtasks"][0]["taskmanager"].rsplit("-", 1)[1])
    cluster.kill_task_executor(index, signal.SIGKILL)
    return index


def test_a_taskexecutor_killed_mid_task_loses_nothing(cluster: LocalCluster, tasks_key: str, tmp_path: Path) -> None:
    log = str(tmp_path)
    graph = job(
        "te-loss",
        [
            vertex("numbers", "numbers", rows=10, log_dir=log),
            vertex("slow", "sleepy", inputs=("numbers",), seconds=6, log_dir=log),
        ],
        tasks_key,
    )
    job_id = cluster.submit(graph)
    wait_for_run(tmp_path, "slow", "start")
    index = kill_the_task_executor_running(cluster, job_id, "slow")
    try:
        result = cluster.wait_for_result(job_id)
        assert result.status == "FINISHED", result.failure
        assert result.vertices["slow"].attempts == 2  # restarted on the surviving TaskExecutor
        assert len(runs(tmp_path, "numbers")) == 1  # its finished upstream was reused
        assert len(runs(tmp_path, "slow", "end")) == 1
    finally:
        cluster.start_task_executor(index)
        cluster.wait_for_task_executors(2)


def test_a_chain_whose_taskexecutor_is_killed_runs_again_whole_and_its_durable_input_is_reused(
    cluster: LocalCluster, tasks_key: str, tmp_path: Path
) -> None:
    """`numbers` (durable) → `slow` chained into `last`: the TaskExecutor running the chain is killed
    while `slow`'s function runs. The chain's attempt runs again whole on the other TaskExecutor,
    `slow` with it; `numbers`' written result is read again, not made again; every vertex keeps its rows."""
    log = str(tmp_path)
    numbers = {**vertex("numbers", "numbers", rows=20, log_dir=log), "result": "durable"}
    graph = job(
        "chain-te-loss",
        [
            numbers,
            vertex("slow", "sleepy", inputs=("numbers",), seconds=6, log_dir=log),
            vertex("last", "sleepy", inputs=("slow",), seconds=0, log_dir=log),
        ],
        tasks_key,
        results="auto",
    )
    job_id = cluster.submit(graph)
    wait_for_run(tmp_path, "slow", "start")
    index = kill_the_task_executor_running(cluster, job_id, "last")  # the chain's head
    try:
        result = cluster.wait_for_result(job_id)
        assert result.status == "FINISHED", result.failure
        assert {vid: v.attempts for vid, v in result.vertices.items()} == {"numbers": 1, "slow": 2, "last": 2}
        assert {vid: v.rows for vid, v in result.vertices.items()} == {"numbers": 20, "slow": 20, "last": 20}
        assert len(runs(tmp_path, "numbers")) == 1  # its durable result was reused
        assert len(runs(tmp_path, "slow", "start")) == 2 and len(runs(tmp_path, "slow", "end")) == 1
        assert len(runs(tmp_path, "last", "end")) == 1
        assert result.vertices["slow"].partitions == () and result.vertices["numbers"].partitions != ()
    finally:
        cluster.start_task_executor(index)
        cluster.wait_for_task_executors(2)


def kept(spec: dict[str, Any]) -> dict[str, Any]:
    """`spec` asking for its result to be kept on its TaskExecutor."""
    return {**spec, "result": "kept"}


def durable(spec: dict[str, Any]) -> dict[str, Any]:
    return {**spec, "result": "durable"}


def task_executors_of(cluster: LocalCluster, job_id: str) -> dict[str, set[str | None]]:
    """The TaskExecutors each vertex's subtasks' current attempts run or ran on."""
    details = cluster.request("GET", f"{cluster.leader_url()}/jobs/{job_id}")[1]
    return {v["id"]: {s["taskmanager"] for s in v["subtasks"]} for v in details["vertices"]}


def kept_dir(cluster: LocalCluster, task_executor_id: str, job_id: str) -> Path:
    return cluster.config.storage_dir / "te-work" / task_executor_id / "kept-results" / job_id


def repair(cluster: LocalCluster, ended: JobResult, vertices: list[str]) -> JobResult:
    """Repair `vertices` of the job that ended with `ended` (asked again while its cleanup runs);
    the repaired run's JobResult."""
    job_id = ended.job_id

    def repair_taken() -> bool:
        status, body = cluster.request("POST", f"{cluster.leader_url()}/jobs/{job_id}/repair", {"vertices": vertices})
        assert status in (200, 202) or (status == 409 and body.get("running")), body
        return status in (200, 202)

    eventually_blocking(repair_taken, "the repair to be taken", timeout=30)

    def repaired_result() -> JobResult | None:
        outcome = cluster.wait_for_result(job_id)
        return outcome if outcome.end_time > ended.end_time else None

    return eventually_blocking(repaired_result, "the repaired run's result", timeout=120)


def kept_fan_in(name: str, key: str, log_dir: Path) -> dict[str, Any]:
    """The fan-in graph with `numbers` kept on its TaskExecutor, read by `double` and `square` (durable)."""
    log = str(log_dir)
    return job(
        name,
        [
            kept(vertex("numbers", "numbers", parallelism=2, rows=100, log_dir=log)),
            durable(vertex("double", "double", inputs=("numbers",), parallelism=2, log_dir=log)),
            durable(vertex("square", "square", inputs=("numbers",), parallelism=2, log_dir=log)),
            vertex("total", "total", inputs=("double", "square"), log_dir=log),
        ],
        key,
        results="auto",
    )


def test_a_kept_result_is_read_beside_its_producer_released_once_read_and_made_again_for_a_repair(
    cluster: LocalCluster, tasks_key: str, tmp_path: Path, spark: Any
) -> None:
    """`numbers` keeps its result on its TaskExecutor: both of its subtasks and all of its readers run
    there (two TaskExecutors of two slots each, so anything else would be allowed), its result never
    reaches the results directory, the report is the one the durable run gives, and the TaskExecutor's
    copy is deleted once read. A repair of one reader runs `numbers` again, and its other reader."""
    cluster.wait_for_task_executors(2)
    job_id = cluster.submit(kept_fan_in("kept-fan-in", tasks_key, tmp_path))
    result = cluster.wait_for_result(job_id)
    assert result.status == "FINISHED", result.failure
    assert {vid: v.rows for vid, v in result.vertices.items()} == {
        "numbers": 100,
        "double": 100,
        "square": 100,
        "total": 1,
    }
    placed = task_executors_of(cluster, job_id)
    (site,) = placed["numbers"] | placed["double"] | placed["square"]
    assert site is not None
    assert result.vertices["numbers"].partitions == () and result.vertices["numbers"].result_path is None
    assert not list((cluster.config.storage_dir / "results" / job_id / "numbers").glob("*/*.parquet"))
    total = spark.read.parquet(*result.vertices["total"].partitions).collect()
    assert [(r.doubled, r.squared) for r in total] == [(2 * sum(range(100)), sum(n * n for n in range(100)))]
    eventually_blocking(
        lambda: not kept_dir(cluster, site, job_id).exists(), "the kept result to be released", timeout=30
    )
    assert len(runs(tmp_path, "numbers")) == 2

    repaired = repair(cluster, result, ["double"])
    assert repaired.status == "FINISHED", repaired.failure
    # every vertex ran in the repair (a vertex whose result it kept would show no attempt): numbers
    # because its kept copy was deleted at the job's end, square because it reads numbers' new result
    assert {vid: v.attempts for vid, v in repaired.vertices.items()} == dict.fromkeys(
        ("numbers", "double", "square", "total"), 1
    )
    assert len(runs(tmp_path, "numbers")) == 4 and len(runs(tmp_path, "square")) == 4


def submit_kept_three_stages(cluster: LocalCluster, name: str, tasks_key: str, log_dir: Path, *, slow_s: float) -> str:
    """numbers (20 rows, kept) → slow (durable, sleeps `slow_s`) → last, submitted; its id once
    `slow` has started."""
    log = str(log_dir)
    graph = job(
        name,
        [
            kept(vertex("numbers", "numbers", rows=20, log_dir=log)),
            durable(vertex("slow", "sleepy", inputs=("numbers",), seconds=slow_s, log_dir=log)),
            vertex("last", "sleepy", inputs=("slow",), seconds=0, log_dir=log),
        ],
        tasks_key,
        results="auto",
    )
    cluster.wait_for_task_executors(2)
    job_id = cluster.submit(graph)
    wait_for_run(log_dir, "slow", "start")
    return job_id


def plant_kept_result(cluster: LocalCluster, task_executor_id: str, job_id: str) -> Path:
    """What a release lost at a job's end leaves on a TaskExecutor: a kept partition of the job."""
    partition = kept_dir(cluster, task_executor_id, job_id) / "numbers" / f"0-{uuid.uuid4().hex}"
    partition.mkdir(parents=True)
    (partition / "part-00000.parquet").write_bytes(b"PAR1")
    return partition


def test_a_taskexecutor_deletes_the_kept_results_of_ended_jobs_the_master_names_on_its_heartbeat(
    cluster: LocalCluster, tasks_key: str, tmp_path: Path
) -> None:
    """Releases lost at a job's end (a leader killed, a broadcast missed) leave kept results on a
    TaskExecutor. Each heartbeat names the jobs whose results it keeps, and the master answers which
    ended: those of a finished job and of one it does not know go, those of a running job stay
    until it ends, also on a TaskExecutor its JobMaster never sends a release to."""
    cluster.wait_for_task_executors(2)
    finished = cluster.submit(job("finished", [vertex("numbers", "numbers", rows=5)], tasks_key))
    assert cluster.wait_for_result(finished).status == "FINISHED"
    running = submit_kept_three_stages(cluster, "kept-while-planted", tasks_key, tmp_path, slow_s=8)
    (site,) = task_executors_of(cluster, running)["numbers"]
    assert site is not None
    [elsewhere] = {cluster.task_executor_id(i) for i in range(2)} - {site}
    unknown = uuid.uuid4().hex
    ended = [
        plant_kept_result(cluster, te, job_id).parents[1] for te in (site, elsewhere) for job_id in (finished, unknown)
    ]
    of_running = plant_kept_result(cluster, elsewhere, running)
    assert all(job_dir.is_dir() for job_dir in ended)

    eventually_blocking(
        lambda: not any(job_dir.exists() for job_dir in ended),
        "the kept results of the ended and the unknown job to be deleted",
        timeout=30,
    )
    result = cluster.request("GET", f"{cluster.leader_url()}/jobs/{running}")[1]
    assert result["status"] == "RUNNING"  # answered after the deletions: heartbeats named it meanwhile
    assert of_running.exists()

    assert cluster.wait_for_result(running).status == "FINISHED"
    eventually_blocking(
        lambda: not kept_dir(cluster, elsewhere, running).exists(),
        "the running job's kept results where no release goes to be deleted once it ended",
        timeout=30,
    )


def test_a_taskexecutor_lost_with_a_kept_result_runs_its_producer_again(
    cluster: LocalCluster, tasks_key: str, tmp_path: Path
) -> None:
    """`numbers` (kept) → `slow` → `last`: the TaskExecutor that keeps `numbers`' result and runs
    `slow` beside it is killed. `numbers` runs again on the other TaskExecutor (its result went with
    the first), `slow` after it there; nothing else runs twice, and every vertex keeps its rows."""
    job_id = submit_kept_three_stages(cluster, "kept-te-loss", tasks_key, tmp_path, slow_s=6)
    (first,) = task_executors_of(cluster, job_id)["numbers"]
    index = kill_the_task_executor_running(cluster, job_id, "slow")
    assert cluster.task_executor_id(index) == first  # it ran beside the result it read
    try:
        result = cluster.wait_for_result(job_id)
        assert result.status == "FINISHED", result.failure
        assert {vid: v.attempts for vid, v in result.vertices.items()} == {"numbers": 2, "slow": 2, "last": 1}
        assert {vid: v.rows for vid, v in result.vertices.items()} == {"numbers": 20, "slow": 20, "last": 20}
        assert len(runs(tmp_path, "numbers")) == 2 and len(runs(tmp_path, "slow", "end")) == 1
        placed = task_executors_of(cluster, job_id)
        assert placed["numbers"] == placed["slow"] != {first}
    finally:
        cluster.start_task_executor(index)
        cluster.wait_for_task_executors(2)


def test_a_leader_killed_while_a_kept_result_is_read_runs_no_finished_vertex_again(
    cluster: LocalCluster, tasks_key: str, tmp_path: Path
) -> None:
    """The leader is killed while `slow` reads `numbers`' kept result. The new leader learns from the
    stored progress where that result is, runs `slow` on that TaskExecutor again, and `numbers` never
    runs again."""
    job_id = submit_kept_three_stages(cluster, "kept-failover", tasks_key, tmp_path, slow_s=8)
    (site,) = task_executors_of(cluster, job_id)["numbers"]
    old_leader = cluster.wait_for_leader()
    cluster.kill_master(old_leader, signal.SIGKILL)
    cluster.wait_for_leader(exclude=old_leader, timeout=30)
    try:
        result = cluster.wait_for_result(job_id)
        assert result.status == "FINISHED", result.failure
        assert result.vertices["numbers"].attempts <= 1 and len(runs(tmp_path, "numbers")) == 1
        assert {vid: v.rows for vid, v in result.vertices.items()} == {"numbers": 20, "slow": 20, "last": 20}
        assert len(runs(tmp_path, "last", "end")) == 1
        assert task_executors_of(cluster, job_id)["slow"] == {site}
        eventually_blocking(
            lambda: not kept_dir(cluster, str(site), job_id).exists(), "the kept result to be released", timeout=30
        )
    finally:
        cluster.start_master(old_leader)


def submit_three_stages(
    cluster: LocalCluster, name: str, tasks_key: str, log_dir: Path, *, rows: int, slow_s: float
) -> str:
    """numbers (`rows`) → slow (sleeps `slow_s`) → last, submitted; its id once `slow` has started."""
    log = str(log_dir)
    job_id = cluster.submit(
        job(
            name,
            [
                vertex("numbers", "numbers", rows=rows, log_dir=log),
                vertex("slow", "sleepy", inputs=("numbers",), seconds=slow_s, log_dir=log),
                vertex("last", "sleepy", inputs=("slow",), seconds=0, log_dir=log),
            ],
            tasks_key,
        )
    )
    wait_for_run(log_dir, "slow", "start")
    return job_id


def assert_finished_once(cluster: LocalCluster, job_id: str, log_dir: Path) -> None:
    """A `submit_three_stages` job finished with nothing lost or run twice; the leader lists it once."""
    result = cluster.wait_for_result(job_id)
    assert result.status == "FINISHED", result.failure
    assert len(runs(log_dir, "numbers")) == 1
    assert len(runs(log_dir, "last", "end")) == 1
    jobs = cluster.request("GET", cluster.leader_url() + "/jobs")[1]["jobs"]
    assert [j["status"] for j in jobs if j["id"] == job_id] == ["FINISHED"]


def test_a_zookeeper_outage_longer_than_the_session_loses_and_repeats_nothing(
    cluster: LocalCluster, zookeeper_server: ZooKeeperServer, tasks_key: str, tmp_path: Path
) -> None:
    job_id = submit_three_stages(cluster, "zk-outage", tasks_key, tmp_path, rows=10, slow_s=4)
    zookeeper_server.pause()
    try:
        time.sleep(7.0)  # longer than the 4 s session: every leader's session expires
    finally:
        zookeeper_server.resume()
    assert_finished_once(cluster, job_id, tmp_path)


def test_sigkill_of_the_leader_mid_job_loses_and_repeats_nothing(
    cluster: LocalCluster, tasks_key: str, tmp_path: Path
) -> None:
    job_id = submit_three_stages(cluster, "failover", tasks_key, tmp_path, rows=20, slow_s=8)
    old_leader = cluster.wait_for_leader()
    killed_at = time.monotonic()
    cluster.kill_master(old_leader, signal.SIGKILL)
    new_leader = cluster.wait_for_leader(exclude=old_leader, timeout=30)
    print(f"\nstandby {new_leader} took over {time.monotonic() - killed_at:.2f}s after SIGKILL of {old_leader}")
    assert_finished_once(cluster, job_id, tmp_path)  # `numbers` finished before the kill: not re-run
    cluster.start_master(old_leader)  # back to two masters for later tests


def test_a_job_whose_cleanup_fails_is_cleaned_by_the_next_leader_and_not_rerun(
    cluster: LocalCluster, tasks_key: str, tmp_path: Path
) -> None:
    from kazoo.client import KazooClient
    from kazoo.security import OPEN_ACL_UNSAFE, make_acl

    cluster.wait_for_task_executors(2)
    jobgraphs = f"{cluster.config.get(HA_ZOOKEEPER_PATH_ROOT)}/{cluster.config.get(HA_CLUSTER_ID)}/jobgraphs"
    zk = KazooClient(hosts=cluster.config.get(HA_ZOOKEEPER_QUORUM))
    zk.start()
    try:
        # no one may delete JobGraphs: the leader's cleanup fails and keeps retrying
        zk.set_acls(
            jobgraphs, [make_acl("world", "anyone", read=True, write=True, create=True, delete=False, admin=True)]
        )
        job_id = cluster.submit(
            job("cleanup", [vertex("numbers", "numbers", rows=5, log_dir=str(tmp_path))], tasks_key)
        )
        assert cluster.wait_for_result(job_id).status == "FINISHED"
        dirty = (
            cluster.config.storage_dir / "job-result-store" / cluster.config.get(HA_CLUSTER_ID) / f"{job_id}_DIRTY.json"
        )
        time.sleep(1.0)  # room for a cleanup, which cannot succeed
        assert dirty.exists() and zk.exists(f"{jobgraphs}/{job_id}")
        old_leader = cluster.wait_for_leader()
        cluster.kill_master(old_leader, signal.SIGKILL)
        cluster.wait_for_leader(exclude=old_leader, timeout=30)
        time.sleep(1.0)  # as above, for the new leader
        assert dirty.exists()  # the new leader cannot clean up either, and does not re-run the job
        zk.set_acls(jobgraphs, OPEN_ACL_UNSAFE)
        eventually_blocking(
            lambda: not dirty.exists() and not zk.exists(f"{jobgraphs}/{job_id}"),
            "the new leader to finish the cleanup",
            interval=0.2,
        )
        assert len(runs(tmp_path, "numbers")) == 1
        status, body = cluster.request("GET", f"{cluster.leader_url()}/jobs/{job_id}/execution-result")
        assert status == 200 and body["job_execution_result"]["status"] == "FINISHED"
        cluster.start_master(old_leader)
    finally:
        zk.set_acls(jobgraphs, OPEN_ACL_UNSAFE)
        zk.stop()
        zk.close()
