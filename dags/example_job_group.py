"""The sales pipeline as an Airflow-native JobGraph: one job on sparkdispatch, one Airflow task per vertex.

`SparkDispatchJobGroup` adds a `sales.launch` task that submits the whole graph once per DAG
run; each `SparkDispatchVertexOperator` task then waits for its own vertex (deferred to the
triggerer, where the five share one poll of the job) and succeeds or fails with it, so the grid
shows every step of the pipeline. A task after the group reads the report vertex's result from its
XCom. Needs a `sparkdispatch_default` connection, as example_pipeline.py does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pendulum
from airflow.sdk import DAG, task

from sparkdispatch.operators import SparkDispatchJobGroup, SparkDispatchVertexOperator

PIPELINES = Path(__file__).parent / "pipelines"

# retries: a retried launch re-attaches to its job; a retried vertex task waits for its vertex again
with DAG(
    "sparkdispatch_sales_job_group",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={"rows": 100_000},
    tags=["sparkdispatch", "example"],
    default_args={"retries": 2},
):
    with SparkDispatchJobGroup(
        group_id="sales",
        job_name="sales-report",
        artifacts=[str(PIPELINES)],
        restart_strategy={"type": "fixed-delay", "attempts": 2, "delay_s": 1.0},
        config={"spark.sql.shuffle.partitions": "4"},
    ):
        generate = SparkDispatchVertexOperator(
            task_id="generate", entrypoint="pipelines.sales:generate", vertex_params={"rows": "{{ params.rows }}"}
        )
        clean = SparkDispatchVertexOperator(task_id="clean", entrypoint="pipelines.sales:clean", parallelism=2)
        by_region = SparkDispatchVertexOperator(
            task_id="revenue_by_region", parallelism=2, entrypoint="pipelines.sales:revenue_by_region"
        )
        by_product = SparkDispatchVertexOperator(
            task_id="revenue_by_product", entrypoint="pipelines.sales:revenue_by_product"
        )
        report = SparkDispatchVertexOperator(task_id="report", entrypoint="pipelines.sales:report")
        generate >> clean >> [by_region, by_product] >> report

    @task
    def announce(report: dict[str, Any]) -> str:
        """A downstream task using a vertex's result: where the report is, and its size."""
        return f"the report of job {report['job_id']} has {report['rows']} rows in {report['result_path']}"

    announce(report.output)
