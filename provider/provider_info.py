"""What Airflow learns about this provider (entry point group `apache_airflow_provider`).

Plain data, no imports of Airflow or of the hook: Airflow reads it to list the provider, to
build the connection form and to find the hook, operators, sensors, triggers and links.
"""

from __future__ import annotations

from typing import Any

INTEGRATION = "sparkdispatch"


def _optional(kind: str, **extra: Any) -> dict[str, Any]:
    return {"type": [kind, "null"], **extra}


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
                "integration-name": INTEGRATION,
                "external-doc-url": "https://pypi.org/project/sparkdispatch/",
                "tags": ["service"],
            }
        ],
        "hooks": [{"integration-name": INTEGRATION, "python-modules": ["sparkdispatch.hooks.sparkdispatch"]}],
        "operators": [
            {
                "integration-name": INTEGRATION,
                "python-modules": [
                    "sparkdispatch.operators.submit",
                    "sparkdispatch.operators.job_group",
                    "sparkdispatch.operators.decorators",
                ],
            }
        ],
        "sensors": [{"integration-name": INTEGRATION, "python-modules": ["sparkdispatch.operators.sensors"]}],
        "triggers": [{"integration-name": INTEGRATION, "python-modules": ["sparkdispatch.operators.triggers"]}],
        "extra-links": ["sparkdispatch.operators.links.SparkDispatchJobLink"],
        "task-decorators": [
            {"name": "sparkdispatch", "class-name": "sparkdispatch.operators.decorators.sparkdispatch_task"}
        ],
        "connection-types": [
            {
                "connection-type": "sparkdispatch",
                "hook-class-name": "sparkdispatch.hooks.sparkdispatch.SparkDispatchHook",
                "hook-name": "sparkdispatch",
                "conn-fields": {
                    "zookeeper_quorum": {
                        "label": "ZooKeeper quorum",
                        "description": "host:port,... of the ensemble; when set, the leader is found through "
                        "ZooKeeper and Host is not used",
                        "schema": _optional("string"),
                    },
                    "cluster_id": {
                        "label": "Cluster id",
                        "description": "the masters' high-availability.cluster-id",
                        "schema": _optional("string", default="default"),
                    },
                    "zookeeper_root": {
                        "label": "ZooKeeper root",
                        "description": "the masters' high-availability.zookeeper.path.root",
                        "schema": _optional("string", default="/sparkdispatch"),
                    },
                    "token": {
                        "label": "Token",
                        "description": "the masters' rest.auth.token (or put it in Password)",
                        "schema": _optional("string", format="password"),
                    },
                    "ca_file": {
                        "label": "CA file",
                        "description": "PEM file of the CA that signed the masters' HTTPS certificate (their "
                        "rest.ssl.certificate); empty: the system's trust store",
                        "schema": _optional("string"),
                    },
                    "client_certificate": {
                        "label": "Client certificate",
                        "description": "PEM certificate presented to masters that ask for one (rest.ssl.client-ca)",
                        "schema": _optional("string"),
                    },
                    "client_key": {
                        "label": "Client key",
                        "description": "PEM private key file of the client certificate",
                        "schema": _optional("string"),
                    },
                },
                "ui-field-behaviour": {
                    "hidden-fields": ["login"],
                    "relabeling": {
                        "host": "Master REST address(es)",
                        "password": "Token",
                        "schema": "Scheme (http or https)",
                    },
                    "placeholders": {
                        "host": "master-1:8081,master-2:8081",
                        "port": "8081",
                        "schema": "http",
                        "zookeeper_quorum": "zk-1:2181,zk-2:2181,zk-3:2181",
                    },
                },
            }
        ],
        "config": {
            "sparkdispatch": {
                "description": "Defaults of the sparkdispatch operators and sensors.",
                "options": {
                    "default_deferrable": {
                        "description": "Whether SparkDispatchSubmitJobOperator, SparkDispatchJobSensor and the "
                        "vertex tasks wait in the triggerer when a task does not say. Unset: "
                        "vertex tasks defer, the others follow [operators] default_deferrable.",
                        "version_added": "0.1.0",
                        "type": "boolean",
                        "example": "True",
                        "default": None,
                    },
                },
            },
        },
    }
