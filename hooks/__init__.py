"""Airflow hooks of the sparkdispatch provider."""

from sparkdispatch.hooks.sparkdispatch import SparkDispatchHook

__all__ = ["SparkDispatchHook"]
