"""Airflow operators, sensors, triggers and links of the sparkdispatch provider."""
