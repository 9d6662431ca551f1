"""Submit a job and move on; a sensor waits for its JobResult later.

`submit` returns as soon as the master accepted the job (its id goes to XCom); the sensor
then waits for that job, giving its worker slot back between checks (`reschedule`), and
fails with the remote traceback if the job fails. The graph is a YAML file beside the DAG.
"""

from __future__ import annotations

from pathlib import Path

import pendulum
from airflow.sdk import DAG

from sparkdispatch.operators import SparkDispatchJobSensor, SparkDispatchSubmitJobOperator

PIPELINES = Path(__file__).parent / "pipelines"

with DAG(
    "sparkdispatch_submit_then_sense",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={"rows": 100_000},
    tags=["sparkdispatch", "example"],
):
    submit = SparkDispatchSubmitJobOperator(
        task_id="submit", job_graph="pipelines/sales_graph.yaml", artifacts=[str(PIPELINES)], wait_for_completion=False
    )
    wait = SparkDispatchJobSensor(
        task_id="wait_for_result",
        job_id="{{ ti.xcom_pull(task_ids='submit') }}",
        mode="reschedule",
        poke_interval=5,
        timeout=3600,
    )
    submit >> wait
