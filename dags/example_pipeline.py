"""A multi-step PySpark pipeline run on sparkdispatch, from one Airflow task.

The job: generate orders → clean them (2 subtasks) → revenue by region (2 subtasks) and by
product (fan-out) → one report (fan-in). The task code is `pipelines/sales.py`, shipped to the
TaskExecutors with `artifacts=`. Three DAGs: one waits in its worker slot, one in the
triggerer (`deferrable=True`), and one maps the operator over three sizes of input (three jobs,
with retries). Both need a `sparkdispatch_default` connection, e.g.

    export AIRFLOW_CONN_SPARKDISPATCH_DEFAULT='{"conn_type": "sparkdispatch", "host": "127.0.0.1", "port": 8081}'
"""

from __future__ import annotations

from pathlib import Path

import pendulum
from airflow.sdk import DAG

from sparkdispatch.operators import SparkDispatchSubmitJobOperator

PIPELINES = Path(__file__).parent / "pipelines"

SALES_REPORT = {
    "name": "sales-report",
    "vertices": [
        {"id": "generate", "entrypoint": "pipelines.sales:generate", "params": {"rows": "{{ params.rows }}"}},
        {"id": "clean", "entrypoint": "pipelines.sales:clean", "parallelism": 2, "inputs": ["generate"]},
        {
            "id": "revenue_by_region",
            "entrypoint": "pipelines.sales:revenue_by_region",
            "parallelism": 2,
            "inputs": ["clean"],
        },
        {"id": "revenue_by_product", "entrypoint": "pipelines.sales:revenue_by_product", "inputs": ["clean"]},
        {"id": "report", "entrypoint": "pipelines.sales:report", "inputs": ["revenue_by_region", "revenue_by_product"]},
    ],
    "restart_strategy": {"type": "fixed-delay", "attempts": 2, "delay_s": 1.0},
    "config": {"spark.sql.shuffle.partitions": "4"},
}

DAG_ARGS = {
    "schedule": None,
    "start_date": pendulum.datetime(2026, 1, 1, tz="UTC"),
    "catchup": False,
    "params": {"rows": 100_000},
    "tags": ["sparkdispatch", "example"],
}

with DAG("sparkdispatch_sales_pipeline", **DAG_ARGS):
    SparkDispatchSubmitJobOperator(task_id="sales_report", job_graph=SALES_REPORT, artifacts=[str(PIPELINES)])

with DAG("sparkdispatch_sales_pipeline_deferrable", **DAG_ARGS):
    SparkDispatchSubmitJobOperator(
        task_id="sales_report", job_graph=SALES_REPORT, artifacts=[str(PIPELINES)], deferrable=True, poll_interval=1.0
    )


def sales_report_of(rows: int) -> dict[str, object]:
    """The sales report JobGraph for `rows` orders."""
    generate = {**SALES_REPORT["vertices"][0], "params": {"rows": str(rows)}}
    return {**SALES_REPORT, "name": f"sales-report-{rows}", "vertices": [generate, *SALES_REPORT["vertices"][1:]]}


# One job per input, mapped at run time (Airflow's dynamic task mapping): each mapped task
# instance has its own job id, so retries of one re-attach to its own job.
with DAG("sparkdispatch_sales_by_size", **{**DAG_ARGS, "default_args": {"retries": 2}}):
    SparkDispatchSubmitJobOperator.partial(
        task_id="sales_report", artifacts=[str(PIPELINES)], poll_interval=1.0
    ).expand(job_graph=[sales_report_of(rows) for rows in (1_000, 2_000, 3_000)])
