"""get_provider_info: valid for the installed Airflow, and everything it names exists."""

from __future__ import annotations

import importlib
import json
import os
import tempfile
from importlib import metadata, resources
from typing import Any

os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="sparkdispatch-airflow-home-"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")

import jsonschema

from sparkdispatch import get_provider_info


def airflow_schema(name: str) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(resources.files("airflow").joinpath(name).read_text())
    return schema


def test_provider_info_is_valid_for_the_installed_airflow() -> None:
    info = get_provider_info()
    jsonschema.validate(info, airflow_schema("provider_info.schema.json"))
    assert info["package-name"] == metadata.distribution("sparkdispatch").metadata["Name"]


def test_the_connection_form_behaviour_is_valid() -> None:
    (conn,) = get_provider_info()["connection-types"]
    behaviour = conn["ui-field-behaviour"]
    jsonschema.validate(
        {
            "hidden_fields": behaviour["hidden-fields"],
            "relabeling": behaviour["relabeling"],
            "placeholders": behaviour["placeholders"],
        },
        airflow_schema("customized_form_field_behaviours.schema.json"),
    )
    assert set(conn["conn-fields"]) == {
        "zookeeper_quorum",
        "cluster_id",
        "zookeeper_root",
        "token",
        "ca_file",
        "client_certificate",
        "client_key",
    }
    assert conn["conn-fields"]["token"]["schema"]["format"] == "password"  # kept secret by Airflow


def test_everything_named_exists() -> None:
    info = get_provider_info()
    for section in ("hooks", "operators", "sensors", "triggers"):
        for entry in info[section]:
            for module in entry["python-modules"]:
                importlib.import_module(module)
    class_paths = [*info["extra-links"], *(c["hook-class-name"] for c in info["connection-types"])]
    for path in class_paths:
        module, _, name = path.rpartition(".")
        assert hasattr(importlib.import_module(module), name), path
    hook = importlib.import_module("sparkdispatch.hooks").SparkDispatchHook
    assert info["connection-types"][0]["connection-type"] == hook.conn_type == "sparkdispatch"


def test_airflow_discovers_the_provider_through_its_entry_point() -> None:
    points = [
        ep
        for ep in metadata.entry_points(group="apache_airflow_provider")
        if ep.dist is not None and ep.dist.name == "sparkdispatch"
    ]
    assert len(points) == 1 and points[0].load() is get_provider_info

    from airflow.providers_manager import ProvidersManager
    from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

    manager = ProvidersManager()
    assert "sparkdispatch" in manager.providers
    assert "extra__sparkdispatch__zookeeper_quorum" in manager.connection_form_widgets
    runtime = ProvidersManagerTaskRuntime()
    hook_info = runtime.hooks["sparkdispatch"]
    assert hook_info is not None and hook_info.hook_class_name == "sparkdispatch.hooks.sparkdispatch.SparkDispatchHook"
