"""sparkdispatch: a highly available master for PySpark job graphs, driven from Apache Airflow.

Importing this package imports nothing heavy: Airflow loads it to discover the provider.
"""

from __future__ import annotations

from sparkdispatch.provider_info import get_provider_info

__version__ = "0.1.0"

__all__ = ["__version__", "get_provider_info"]
