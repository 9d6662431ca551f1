"""DriverLog: which lines of the Connect server's log are an attempt's, and when they are copied."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql.connect.shell.progress import StageInfo

from sparkdispatch.taskexecutor.driver_log import MAX_CONTINUATION_LINES, PREFIX, DriverLog

OURS = "5f0c3a52-7d0e-4b8e-9f1e-2b6a1c9d0e11"
THEIRS = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"


def line(thread: str, message: str, level: str = "WARN", logger: str = "DAGScheduler") -> str:
    return f"26/11/23 12:00:01 {level} {logger} [{thread}]: {message}\n"


def op_thread(operation: str) -> str:
    return f"SparkConnectExecuteThread_opId={operation}"


class Collected:
    def __init__(self) -> None:
        self.text = ""

    def __call__(self, text: str) -> None:
        self.text += text


def stage(stage_id: int) -> StageInfo:
    return StageInfo(stage_id=stage_id, num_tasks=2, num_completed_tasks=1, num_bytes_read=0, done=False)


def test_an_attempt_gets_the_lines_of_its_operations_threads_and_stages_only(tmp_path: Path) -> None:
    log = tmp_path / "connect-server.log"
    log.write_text(line(op_thread(OURS), "Job 1 finished: before the attempt, took 1 ms"))
    out = Collected()
    driver = DriverLog(out)
    driver.begin(log)
    with open(log, "a") as server:
        server.write(line(op_thread(OURS), "Job 2 finished: count at <unknown>:0, took 12.5 ms"))
        server.write(line(op_thread(THEIRS), "Job 3 finished: another session's, took 3 ms"))
        server.write(line("task-result-getter-0", "Lost task 0.0 in stage 7.0 (TID 9): boom", "WARN", "TaskSetManager"))
        server.write("org.apache.spark.api.python.PythonException: boom\n\tat frame.one\n")
        server.write(
            line("task-result-getter-1", "Lost task 1.0 in stage 8.0 (TID 10): other", "WARN", "TaskSetManager")
        )
        server.write(
            line("Executor task launch worker for task 0.0 in stage 7.0 (TID 9)", "Fetching a file", "INFO", "Utils")
        )  # INFO: the server's own start lines' level, never copied
        server.write("\tat not.ours\n")
        server.write("26/11/23 12:00:02 WARN WindowExec")  # no newline yet: copied once complete
    driver([stage(7)], 1, OURS, done=True)
    assert out.text == (
        f"{PREFIX}26/11/23 12:00:01 WARN DAGScheduler [{op_thread(OURS)}]: Job 2 finished: count at <unknown>:0, "
        "took 12.5 ms\n"
        f"{PREFIX}26/11/23 12:00:01 WARN TaskSetManager [task-result-getter-0]: Lost task 0.0 in stage 7.0 (TID 9): "
        "boom\n"
        f"{PREFIX}org.apache.spark.api.python.PythonException: boom\n"
        f"{PREFIX}\tat frame.one\n"
    )
    with open(log, "a") as server:
        server.write(f" [{op_thread(OURS)}]: No Partition Defined for Window operation!\n")
    driver.end()
    assert out.text.endswith(
        f"{PREFIX}26/11/23 12:00:02 WARN WindowExec [{op_thread(OURS)}]: No Partition Defined for Window operation!\n"
    )


def test_nothing_is_copied_outside_an_attempt_or_without_a_log(tmp_path: Path) -> None:
    log = tmp_path / "connect-server.log"
    log.write_text("")
    out = Collected()
    driver = DriverLog(out)
    driver([], 0, OURS, done=True)  # a progress report of no attempt (a warm-up's)
    driver.begin(None)
    driver([], 0, OURS, done=True)
    driver.end()
    driver.begin(log)
    driver.end()
    log.write_text(line(op_thread(OURS), "Job 4 finished: after the attempt, took 1 ms"))
    driver([], 0, OURS, done=True)
    assert out.text == ""


def test_a_stack_trace_is_cut_and_a_restarted_servers_new_log_is_read_from_its_start(tmp_path: Path) -> None:
    log = tmp_path / "connect-server.log"
    log.write_text("x" * 500 + "\n")
    out = Collected()
    driver = DriverLog(out)
    driver.begin(log)
    log.write_text(
        line(op_thread(OURS), "Job 5 failed: collect, took 2 ms")
        + "".join(f"\tat frame{i}\n" for i in range(MAX_CONTINUATION_LINES + 5))
    )
    driver([], 0, OURS, done=True)
    lines = out.text.splitlines()
    assert lines[0].endswith("Job 5 failed: collect, took 2 ms")
    assert lines[1:] == [f"{PREFIX}\tat frame{i}" for i in range(MAX_CONTINUATION_LINES)]


def test_a_long_operations_progress_reports_are_lines_of_its_stages(tmp_path: Path) -> None:
    log = tmp_path / "connect-server.log"
    log.write_text("")
    out = Collected()
    driver = DriverLog(out)
    driver.begin(log)
    running = StageInfo(stage_id=32, num_tasks=8, num_completed_tasks=3, num_bytes_read=3 << 20, done=False)
    finished = StageInfo(stage_id=31, num_tasks=2, num_completed_tasks=2, num_bytes_read=0, done=True)
    driver([running, finished], 2, OURS, done=False)
    driver([running, finished], 2, OURS, done=False)  # the same report again: no new line
    driver([finished], 0, THEIRS, done=False)  # all stages done: the end's report, no line
    driver([finished], 0, THEIRS, done=True)  # an operation that reported no running stage: no end line
    driver([], 0, OURS, done=True)
    driver.end()
    assert out.text == (
        f"{PREFIX}operation 5f0c3a52: stage 31 2/2 done, stage 32 3/8; 2 tasks running, 3.0 MiB read\n"
        f"{PREFIX}operation 5f0c3a52 ended\n"
    )


def test_an_attempt_reads_the_log_it_began_with_after_a_newer_server_takes_its_name(tmp_path: Path) -> None:
    log = tmp_path / "connect-server.log"
    log.write_text("")
    out = Collected()
    driver = DriverLog(out)
    driver.begin(log)
    log.replace(tmp_path / "connect-server.log.1")  # a recycled server's successor starts its own log
    log.write_text(
        line(op_thread(THEIRS), "Job 1 finished: the new server's", "WARN")
        + line("task-result-getter-0", "Lost task 0.0 in stage 3.0 (TID 1): not ours", "WARN")
    )
    with open(tmp_path / "connect-server.log.1", "a") as old_server:
        old_server.write(line("task-result-getter-1", "Lost task 0.0 in stage 3.0 (TID 2): ours", "WARN"))
    driver([stage(3)], 1, None, done=True)
    driver.end()
    assert (
        out.text == f"{PREFIX}26/11/23 12:00:01 WARN DAGScheduler [task-result-getter-1]: "
        "Lost task 0.0 in stage 3.0 (TID 2): ours\n"
    )
