"""What Airflow learns about this provider (entry point group `apache_airflow_provider`)."""

from __future__ import annotations

from typing import Any


def get_provider_info() -> dict[str, Any]:
    """The provider's description, validated by Airflow against `provider_info.schema.json`."""
    from sparkdispatch import __version__

    return {
        "package-name": "sparkdispatch",
        "name": "sparkdispatch",
        "description": "Run graphs of PySpark tasks on a highly available, Flink-style master whose "
                       "TaskExecutors keep SparkSessions warm.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": "sparkdispatch",
                "external-doc-url": "https://pypi.org/project/sparkdispatch/",
                "tags": ["service"],
            }
        ],
    }
