"""OpenLineage for the operators, when Airflow's OpenLineage provider is installed.

The provider itself gives each task's event its job, run and parent-run facets (the Airflow task,
its try, the DAG run). The operators add what only they know: the sparkdispatch job as an
external query (`externalQuery` run facet: the master's job id and its address), the result
directories of the vertices that FINISHED as output datasets, the datasets those vertices read
besides the job's results (Spark's `DataFrame.inputFiles()`, by table directory) as input
datasets, and for a vertex task the result directories of the vertices it read as input datasets
too, named as OpenLineage names files (`file` + absolute path; `s3://bucket` + key;
`hdfs://host:port` + path; ...). Nothing here is
imported until the provider asks, so the operators work without it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from airflow.providers.openlineage.extractors import OperatorLineage
    from openlineage.client.event_v2 import Dataset
    from openlineage.client.facet_v2 import RunFacet

    Lineage = OperatorLineage[Dataset, RunFacet]

#: S3 URL schemes Hadoop and Spark use for one and the same store.
_S3_SCHEMES = frozenset({"s3", "s3a", "s3n"})


def dataset_name(path: str) -> tuple[str, str]:
    """The OpenLineage (namespace, name) of a result directory path or URL."""
    parts = urlsplit(path)
    scheme = parts.scheme.lower()
    if scheme in ("", "file"):
        return "file", parts.path if scheme else path
    if scheme in _S3_SCHEMES:
        return f"s3://{parts.netloc}", parts.path.lstrip("/")
    return f"{scheme}://{parts.netloc}", parts.path


def job_lineage(
    job_id: str | None,
    master: str | None,
    outputs: Iterable[Mapping[str, Any]],
    inputs: Iterable[Mapping[str, Any]] = (),
) -> Lineage:
    """The OperatorLineage of a task that ran (part of) sparkdispatch job `job_id`; `outputs` and
    `inputs` are vertex outputs (`vertex_outputs`, a vertex task's XCom): those FINISHED with a
    `result_path` become output and input datasets, and the `input_files` of the FINISHED
    `outputs` input datasets as well."""
    from airflow.providers.openlineage.extractors import OperatorLineage
    from openlineage.client.facet_v2 import external_query_run

    run_facets: dict[str, RunFacet] = {}
    if job_id:
        run_facets["externalQuery"] = external_query_run.ExternalQueryRunFacet(
            externalQueryId=job_id, source=master or "sparkdispatch"
        )
    outputs = list(outputs)
    read = [path for vertex in _finished(outputs) for path in vertex.get("input_files") or ()]
    results_read = [vertex.get("result_path") for vertex in _finished(inputs)]
    return OperatorLineage(
        inputs=_datasets([*results_read, *read]),
        outputs=_datasets(vertex.get("result_path") for vertex in _finished(outputs)),
        run_facets=run_facets,
    )


def _finished(vertices: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [vertex for vertex in vertices if vertex.get("state") == "FINISHED"]


def _datasets(paths: Iterable[object]) -> list[Dataset]:
    """`paths` (result directories and read datasets; None and repeats skipped) as OpenLineage datasets."""
    from openlineage.client.event_v2 import Dataset

    named: dict[tuple[str, str], None] = {}
    for path in paths:
        if path:
            named.setdefault(dataset_name(str(path)))
    return [Dataset(namespace=namespace, name=name) for namespace, name in named]
