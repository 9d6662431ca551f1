"""Airflow hooks of the sparkdispatch provider."""
