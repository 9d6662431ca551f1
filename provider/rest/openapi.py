"""The OpenAPI document of the REST API, generated from the marshmallow schemas (apispec)."""

from __future__ import annotations

from typing import Any

from apispec import APISpec
from apispec.ext.marshmallow import MarshmallowPlugin

from sparkdispatch import __version__
from sparkdispatch.jobgraph_schemas import (
    FailureSchema,
    JobGraphSchema,
    JobResultSchema,
    JobVertexSchema,
    VertexResultSchema,
)


def _json(schema: str | dict[str, Any], description: str) -> dict[str, Any]:
    ref = {"$ref": f"#/components/schemas/{schema}"} if isinstance(schema, str) else schema
    return {"description": description, "content": {"application/json": {"schema": ref}}}


def openapi_document() -> dict[str, Any]:
    """The OpenAPI 3 document served at `/openapi.json` (every path also under `/v1`)."""
    spec = APISpec(title="sparkdispatch master", version=__version__, openapi_version="3.0.3",
                   plugins=[MarshmallowPlugin()])
    for name, schema in (("JobVertex", JobVertexSchema), ("JobGraph", JobGraphSchema),
                         ("Failure", FailureSchema), ("VertexResult", VertexResultSchema),
                         ("JobResult", JobResultSchema)):
        spec.components.schema(name, schema=schema)
    # the restart strategy is a union chosen by its `type`; apispec cannot see through the custom field
    spec.components.schemas["JobGraph"]["properties"]["restart_strategy"] = {
        "type": "object", "nullable": True, "required": ["type"],
        "properties": {"type": {"type": "string",
                                "enum": ["none", "fixed-delay", "exponential-delay", "failure-rate"]}},
        "additionalProperties": True}
    errors = {"type": "object", "required": ["errors", "type"], "additionalProperties": True,
              "properties": {"errors": {"type": "array", "items": {"type": "string"}},
                             "type": {"type": "string", "description": "the sparkdispatch.errors class"}}}
    spec.components.schema("Errors", errors)
    job_id = {"name": "job_id", "in": "path", "required": True, "schema": {"type": "string"}}
    obj = {"type": "object"}
    spec.path("/overview", operations={"get": {"summary": "Cluster overview (any master answers)",
                                                "responses": {"200": _json(obj, "overview")}}})
    spec.path("/jobs", operations={
        "get": {"summary": "Running and finished jobs", "responses": {"200": _json(obj, "jobs")}},
        "post": {"summary": "Submit a JobGraph", "requestBody": _json("JobGraph", "the job"),
                 "responses": {"202": _json(obj, "accepted: {job_id}"),
                               "200": _json(obj, "the same job was submitted before: {job_id}"),
                               "400": _json("Errors", "invalid JobGraph"),
                               "409": _json("Errors", "the job id is taken"),
                               "413": _json("Errors", "body too large")}}})
    spec.path("/jobs/overview", operations={"get": {"summary": "Jobs in Flink's JobDetails shape",
                                                    "responses": {"200": _json(obj, "jobs")}}})
    spec.path("/jobs/{job_id}", parameters=[job_id], operations={
        "get": {"summary": "A job's details", "responses": {"200": _json(obj, "job"),
                                                             "404": _json("Errors", "unknown job")}},
        "patch": {"summary": "Cancel a job (mode=cancel)",
                  "parameters": [{"name": "mode", "in": "query", "schema": {"type": "string", "enum": ["cancel"]}}],
                  "responses": {"202": _json(obj, "cancelling"), "404": _json("Errors", "unknown job"),
                                "409": _json("Errors", "the job already finished or failed")}}})
    spec.path("/jobs/{job_id}/execution-result", parameters=[job_id], operations={
        "get": {"summary": "IN_PROGRESS, or COMPLETED with the JobResult",
                "responses": {"200": _json({"type": "object", "properties": {
                    "status": {"type": "object", "properties": {"id": {"type": "string"}}},
                    "job_execution_result": {"$ref": "#/components/schemas/JobResult"}}}, "result"),
                    "404": _json("Errors", "unknown job")}}})
    spec.path("/taskmanagers", operations={"get": {"summary": "TaskExecutors and their slots",
                                                    "responses": {"200": _json(obj, "taskmanagers")}}})
    spec.path("/artifacts", operations={"post": {
        "summary": "Upload user code (.py or .zip) for a JobGraph's artifacts",
        "requestBody": {"content": {"multipart/form-data": {"schema": {
            "type": "object", "properties": {"file": {"type": "string", "format": "binary"}}}}}},
        "responses": {"201": _json(obj, "{key, filename}"), "400": _json("Errors", "not a .py or .zip"),
                      "413": _json("Errors", "too large")}}})
    return spec.to_dict()
