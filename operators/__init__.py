"""Airflow operators, sensors, triggers and links of the sparkdispatch provider.

`SubmitJobGraphOperator`, `JobResultSensor`, `JobResultTrigger` and `VertexTrigger` are the
deprecated earlier names of `SparkDispatchSubmitJobOperator`, `SparkDispatchJobSensor`,
`SparkDispatchJobTrigger` and `SparkDispatchVertexTrigger` (`sparkdispatch.operators.deprecation`).
"""

from sparkdispatch.operators.job_group import SparkDispatchJobGroup, SparkDispatchVertexOperator
from sparkdispatch.operators.links import SparkDispatchJobLink
from sparkdispatch.operators.sensors import JobResultSensor, SparkDispatchJobSensor
from sparkdispatch.operators.submit import SparkDispatchSubmitJobOperator, SubmitJobGraphOperator
from sparkdispatch.operators.triggers import (
    JobResultTrigger,
    SparkDispatchJobTrigger,
    SparkDispatchVertexTrigger,
    VertexTrigger,
)

__all__ = [
    "JobResultSensor",
    "JobResultTrigger",
    "SparkDispatchJobGroup",
    "SparkDispatchJobLink",
    "SparkDispatchJobSensor",
    "SparkDispatchJobTrigger",
    "SparkDispatchSubmitJobOperator",
    "SparkDispatchVertexOperator",
    "SparkDispatchVertexTrigger",
    "SubmitJobGraphOperator",
    "VertexTrigger",
]
