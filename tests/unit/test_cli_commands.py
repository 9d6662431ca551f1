"""The client commands of `sparkdispatch` against a real master (in process, real HTTP)."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkdispatch.storage.attempt_logs import attempt_log_path
from sparkdispatch.entrypoint.cli import main
from sparkdispatch.model.states import ExecutionState
from sparkdispatch.model.job_result import Failure
from sparkdispatch.model.protocol import TaskDeploymentDescriptor
from sparkdispatch.testing.master import InProcessMaster, TaskOutcome
from sparkdispatch.testing.waiting import eventually


def write_log_then_end(tdd: TaskDeploymentDescriptor) -> TaskOutcome | None:
    """As a slot process does: the function's output in the attempt's log; `bad` fails, `forever`
    runs until cancelled."""
    path = attempt_log_path(tdd.result_path, tdd.attempt)
    assert path is not None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"hello from {tdd.vertex_id}[{tdd.subtask_index}]\n")
    if tdd.vertex_id == "forever":
        return None
    if tdd.vertex_id == "bad":
        return TaskOutcome(ExecutionState.FAILED, Failure("ValueError", "order 42 has no price"))
    return TaskOutcome(rows=10 + tdd.subtask_index, result_path=tdd.result_path)


@pytest.fixture
def master() -> Iterator[InProcessMaster]:
    with InProcessMaster() as running:
        running.run(running.add_task_executor(slots=3, script=write_log_then_end))
        yield running


def cli(master: InProcessMaster, *args: str) -> list[str]:
    return ["-D", "rest.address=127.0.0.1", *args, "-D", f"rest.port={master.url.rsplit(':', 1)[1]}"]


def test_run_wait_shows_each_vertex_progress_then_the_jobs_table(
    master: InProcessMaster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    graph = tmp_path / "graph.json"
    graph.write_text(
        json.dumps(
            {
                "name": "sales",
                "restart_strategy": {"type": "none"},
                "results": "durable",  # extract's output in a log of its own, not in report's chain
                "vertices": [
                    {"id": "extract", "entrypoint": "m:f", "parallelism": 2},
                    {"id": "report", "entrypoint": "m:g", "inputs": ["extract"]},
                ],
            }
        )
    )
    assert main(cli(master, "run", str(graph), "--wait")) == 0
    out = capsys.readouterr().out
    # a line per vertex when its progress changes (the scripted tasks end too fast to see them all)
    assert re.search(r"\d\d:\d\d:\d\d  extract {18}[A-Z]+ +[0-2]/2 subtasks finished, attempt 1\n", out), out
    job_id = out.split("job ", 1)[1].split(" ", 1)[0]
    table = out[out.index(f"job {job_id}  sales  FINISHED") :].splitlines()
    assert table[3].split() == ["VERTEX", "STATE", "SUBTASKS", "ATTEMPTS", "ROWS", "RESULT"]
    assert table[4].split()[:5] == ["extract", "FINISHED", "2/2", "1", "21"]

    assert main(cli(master, "status", job_id)) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"job {job_id}  sales  FINISHED"
    assert main(cli(master, "status", job_id, "--json")) == 0
    assert json.loads(capsys.readouterr().out)["result"]["status"] == "FINISHED"

    assert main(cli(master, "logs", job_id)) == 0
    assert sorted(capsys.readouterr().out.splitlines()) == [
        "extract[0] attempt 0: hello from extract[0]",
        "extract[1] attempt 0: hello from extract[1]",
        "report[0] attempt 0: hello from report[0]",
    ]
    assert main(cli(master, "logs", job_id, "report", "--follow")) == 0  # an ended job: its lines, then done
    assert capsys.readouterr().out.splitlines() == ["report[0] attempt 0: hello from report[0]"]
    assert main(cli(master, "logs", job_id, "nope")) == 2
    assert f"job {job_id} has no vertex 'nope'" in capsys.readouterr().err


def test_a_failed_jobs_status_names_its_failure(
    master: InProcessMaster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    graph = tmp_path / "graph.json"
    graph.write_text(
        json.dumps(
            {"name": "broken", "restart_strategy": {"type": "none"}, "vertices": [{"id": "bad", "entrypoint": "m:f"}]}
        )
    )
    assert main(cli(master, "run", str(graph), "--wait")) == 1
    out = capsys.readouterr().out
    assert re.search(r"  bad {22}[A-Z]+ +0/1 subtasks finished, attempt 1\n", out), out
    assert out.splitlines()[-4:] == [
        "bad     FAILED  0/1       1         -     -",
        "",
        "failure: ValueError: order 42 has no price",
        "  bad: ValueError: order 42 has no price",
    ]


@pytest.mark.parametrize(
    ("terminal", "answer", "status"), [(True, "y", "CANCELED"), (True, "", "RUNNING"), (False, "y", "RUNNING")]
)
def test_ctrl_c_while_waiting_asks_on_a_terminal_whether_to_cancel_the_job(
    master: InProcessMaster,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    terminal: bool,
    answer: str,
    status: str,
) -> None:
    from sparkdispatch.entrypoint.cli import _offer_cancel
    from sparkdispatch.client import SparkDispatchClient

    monkeypatch.setattr("sys.stdin.isatty", lambda: terminal)
    monkeypatch.setattr("builtins.input", lambda prompt: answer)

    async def ctrl_c() -> str:
        async with SparkDispatchClient(addresses=[master.url]) as client:
            submitted = await client.submit({"name": "long", "vertices": [{"id": "forever", "entrypoint": "m:f"}]})
            await _offer_cancel(client, submitted.job_id)

            async def reached() -> str | None:
                current = (await client.job(submitted.job_id)).status.value
                return current if current == status else None

            return await eventually(reached, f"the job to be {status}")

    assert asyncio.run(ctrl_c()) == status
    err = capsys.readouterr().err
    assert ("cancelling job" in err) == (status == "CANCELED")
    assert ("keeps running" in err) == (status == "RUNNING")


def test_a_task_executor_whose_worker_gave_up_exits_with_the_workers_code(monkeypatch: pytest.MonkeyPatch) -> None:
    # a supervisor (systemd, compose `restart: on-failure`) restarts only a process that exits non-zero
    import sparkdispatch.taskexecutor.main as te_main

    monkeypatch.setattr(te_main, "run_task_executor", lambda config: 1)
    assert main(["taskexecutor"]) == 1
