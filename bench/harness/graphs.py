"""The job graphs the benchmarks run: chains of one task function, and the sales pipeline of dags/pipelines."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.paths import DAGS_DIR

PIPELINES_DIR = DAGS_DIR / "pipelines"
SALES_GRAPH = PIPELINES_DIR / "sales_graph.yaml"


def chain_graph(
    name: str,
    length: int,
    *,
    entrypoint: str,
    artifact: str,
    params: dict[str, Any] | None = None,
    durable: bool = False,
) -> dict[str, Any]:
    """`length` vertices v00 → v01 → ..., each running `entrypoint` once: chained into one task by
    the master, or with `durable` each a task of its own (`"results": "durable"`)."""
    vertices = [
        {
            "id": f"v{i:02d}",
            "entrypoint": entrypoint,
            "parallelism": 1,
            "inputs": [f"v{i - 1:02d}"] if i else [],
            "params": dict(params or {}),
        }
        for i in range(length)
    ]
    return {
        "name": name,
        "vertices": vertices,
        "artifacts": [artifact],
        "restart_strategy": {"type": "fixed-delay", "attempts": 0, "delay_s": 0.0},
        **({"results": "durable"} if durable else {}),
    }


def pipelines_artifact(directory: Path) -> Path:
    """`dags/pipelines` zipped as the Airflow operator ships it (`pipelines.zip`), written into `directory`."""
    from sparkdispatch.model.artifacts import read_artifact

    name, data = read_artifact(PIPELINES_DIR)
    path = directory / name
    path.write_bytes(data)
    return path


def sales_graph(artifact: str, *, rows: int, name: str = "sales-report") -> dict[str, Any]:
    """The example pipeline's JobGraph (dags/pipelines/sales_graph.yaml) with `rows` orders and no restarts
    (a failed attempt fails the benchmark instead of hiding in its time)."""
    import yaml

    graph = yaml.safe_load(SALES_GRAPH.read_text().replace("{{ params.rows }}", str(rows)))
    graph["name"] = name
    graph["artifacts"] = [artifact]
    graph["restart_strategy"] = {"type": "fixed-delay", "attempts": 0, "delay_s": 0.0}
    return dict(graph)
