"""A job's `environment`: PEP 508 requirements or wheel keys, refused with the field named otherwise."""

from __future__ import annotations

from typing import Any

import pytest

from sparkdispatch.errors import InvalidJobGraph
from sparkdispatch.model.environment import Environment
from sparkdispatch.model.job_graph import JobGraph
from sparkdispatch.model.protocol import TaskDeploymentDescriptor

WHEEL_KEY = "ab" * 32


def graph(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": "geo",
        "vertices": [
            {"id": "load", "entrypoint": "pipelines.geo:load"},
            {"id": "plot", "entrypoint": "pipelines.geo:plot", "inputs": ["load"]},
        ],
    }
    body.update(overrides)
    return body


def refusal(body: Any) -> dict[str, list[str]]:
    with pytest.raises(InvalidJobGraph) as info:
        JobGraph.from_dict(body)
    return info.value.field_errors


def test_requirements_and_wheel_keys_are_taken_and_round_trip() -> None:
    dependencies = ["pandas==2.2.3", "Tabulate >= 0.9", 'shapely[vectorized]>=2; python_version >= "3.10"', WHEEL_KEY]
    loaded = JobGraph.from_dict(graph(environment={"dependencies": dependencies}))
    assert loaded.environment == Environment(tuple(dependencies))
    assert JobGraph.from_dict(loaded.to_dict()) == loaded
    assert loaded.environment.wheel_keys == (WHEEL_KEY,)
    assert loaded.environment.requirements == (
        "pandas==2.2.3",
        'shapely[vectorized]>=2; python_version >= "3.10"',
        "tabulate>=0.9",
    )
    assert loaded.wheel_keys() == {WHEEL_KEY: "environment.dependencies[3]"}


def test_a_graph_without_environment_keeps_its_json_form_and_fingerprint() -> None:
    loaded = JobGraph.from_dict(graph())
    assert "environment" not in loaded.to_dict() and "environment" not in loaded.to_dict()["vertices"][0]
    assert loaded.environment is None and loaded.environment_of("load") is None


def test_a_vertex_environment_replaces_the_jobs_for_that_vertex() -> None:
    body = graph(environment={"dependencies": ["tabulate==0.9.0"]})
    body["vertices"][1]["environment"] = {"dependencies": ["tabulate==0.8.10", WHEEL_KEY]}
    loaded = JobGraph.from_dict(body)
    assert loaded.environment_of("load") == Environment(("tabulate==0.9.0",))
    assert loaded.environment_of("plot") == Environment(("tabulate==0.8.10", WHEEL_KEY))
    assert loaded.wheel_keys() == {WHEEL_KEY: "vertices[1].environment.dependencies[1]"}
    assert JobGraph.from_dict(loaded.to_dict()) == loaded


def test_the_same_requirements_spelled_otherwise_are_the_same_set() -> None:
    one = Environment(("Pandas == 2.2.3", "tabulate>=0.9"))
    other = Environment(("tabulate>=0.9", "pandas==2.2.3", "pandas==2.2.3"))
    assert one.requirements == other.requirements


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ("pandas @ https://example.org/pandas-2.2.3.whl", "names a URL"),
        ("https://example.org/pandas-2.2.3-py3-none-any.whl", "URL or a path"),
        ("git+https://github.com/org/repo", "URL or a path"),
        ("file:///srv/wheels/pandas.whl", "URL or a path"),
        ("./dist/mylib-1.0-py3-none-any.whl", "URL or a path"),
        ("/srv/wheels/mylib", "URL or a path"),
        ("~/mylib", "URL or a path"),
        ("mylib-1.0.tar.gz", "URL or a path"),
        ("--index-url https://evil.example/simple", "pip option"),
        ("-e .", "pip option"),
        ("pandas --extra-index-url https://evil.example/simple", "pip option"),
        ("pandas==", "not a PEP 508 requirement"),
        ("pandas; os.system('x')", "not a PEP 508 requirement"),
        ("", "is empty"),
        ("  ", "is empty"),
        ("a" * 1001, "longer than 1000"),
    ],
)
def test_a_dependency_that_is_no_requirement_is_refused_naming_its_field(entry: str, says: str) -> None:
    errors = refusal(graph(environment={"dependencies": ["tabulate>=0.9", entry]}))
    assert list(errors) == ["environment.dependencies[1]"], errors
    assert says in " ".join(next(iter(errors.values())))


def test_a_bad_vertex_dependency_names_the_vertex_field() -> None:
    body = graph()
    body["vertices"][0]["environment"] = {"dependencies": ["-r requirements.txt"]}
    errors = refusal(body)
    assert [name for name in errors if name.startswith("vertices[0].environment.dependencies")], errors


@pytest.mark.parametrize(
    ("environment", "field"),
    [
        ({"dependencies": []}, "environment.dependencies"),
        ({}, "environment.dependencies"),
        ({"dependencies": "pandas"}, "environment.dependencies"),
        ({"dependencies": [3]}, "environment.dependencies"),
        ({"dependencies": ["pandas"], "index_url": "https://evil.example/simple"}, "environment.index_url"),
        ("pandas", "environment"),
    ],
)
def test_a_malformed_environment_is_refused_naming_its_field(environment: Any, field: str) -> None:
    errors = refusal(graph(environment=environment))
    assert any(name.startswith(field) for name in errors), errors


def test_a_deployment_carries_its_vertex_environment() -> None:
    tdd = TaskDeploymentDescriptor(
        job_id="a" * 32,
        job_master_id="jm",
        execution_id="e",
        vertex_id="load",
        entrypoint="pipelines.geo:load",
        subtask_index=0,
        parallelism=1,
        attempt=0,
        allocation_id="x",
        slot_index=0,
        result_path="/tmp/r",
        environment=Environment(("tabulate==0.9.0", WHEEL_KEY)),
    )
    assert TaskDeploymentDescriptor.from_dict(tdd.to_dict()) == tdd
    plain = TaskDeploymentDescriptor.from_dict({k: v for k, v in tdd.to_dict().items() if k != "environment"})
    assert plain.environment is None and "environment" not in plain.to_dict()
