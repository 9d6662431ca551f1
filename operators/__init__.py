"""Airflow operators, sensors, triggers and links of the sparkdispatch provider."""

from sparkdispatch.operators.job_group import SparkDispatchJobGroup, SparkDispatchVertexOperator
from sparkdispatch.operators.links import SparkDispatchJobLink
from sparkdispatch.operators.sensors import JobResultSensor
from sparkdispatch.operators.submit import SubmitJobGraphOperator
from sparkdispatch.operators.triggers import JobResultTrigger, VertexTrigger

__all__ = ["JobResultSensor", "JobResultTrigger", "SparkDispatchJobGroup", "SparkDispatchJobLink",
           "SparkDispatchVertexOperator", "SubmitJobGraphOperator", "VertexTrigger"]
