"""The OpenAPI document of the REST API (`/openapi.json`): every call's parameters, bodies and answers.

Every schema is generated (apispec) from the declaration the master itself uses: the JobGraph,
the JobResult and the TaskExecutor protocol's bodies from their marshmallow schemas, the answers
from their shapes (`sparkdispatch.model.rest_shapes`, through `model.codec.schema_of`). Only the
error body and the parameters are written here. Every status a call can answer is listed with its
body (`tests/integration/test_api_fuzz.py` holds the master to it with schemathesis).
"""

from __future__ import annotations

from typing import Any

from apispec import APISpec
from apispec.ext.marshmallow import MarshmallowPlugin
from marshmallow import Schema

from sparkdispatch import __version__
from sparkdispatch.model.codec import schema_of
from sparkdispatch.model.rest_shapes import ANSWERS
from sparkdispatch.model.restart import RESTART_SCHEMAS
from sparkdispatch.model.job_graph import JobGraphSchema, JobVertexSchema
from sparkdispatch.model.job_result import FailureSchema, JobResultSchema, VertexResultSchema
from sparkdispatch.model.protocol import (
    ExecutionReportSchema,
    ExecutionStateUpdateSchema,
    HeartbeatPayloadSchema,
    RegistrationAckSchema,
    SlotReportSchema,
    SlotStatusSchema,
    TaskExecutorRegistrationSchema,
)
from sparkdispatch.rest.inputs import PATH_IDS
from sparkdispatch.rest.taskexecutor_routes import SESSION_HEADER

JSONSchema = dict[str, Any]

_MODEL_SCHEMAS: tuple[tuple[str, type[Schema]], ...] = (
    ("JobVertex", JobVertexSchema),
    ("JobGraph", JobGraphSchema),
    ("Failure", FailureSchema),
    ("VertexResult", VertexResultSchema),
    ("JobResult", JobResultSchema),
    ("SlotStatus", SlotStatusSchema),
    ("SlotReport", SlotReportSchema),
    ("ExecutionReport", ExecutionReportSchema),
    ("TaskExecutorRegistration", TaskExecutorRegistrationSchema),
    ("RegistrationAck", RegistrationAckSchema),
    ("Heartbeat", HeartbeatPayloadSchema),
    ("ExecutionStateUpdate", ExecutionStateUpdateSchema),
)


def _ref(name: str) -> JSONSchema:
    return {"$ref": f"#/components/schemas/{name}"}


STRING: JSONSchema = {"type": "string"}

#: the body of every error answer (`SparkDispatchError.to_body`)
ERRORS: JSONSchema = {
    "type": "object",
    "required": ["errors", "type"],
    "additionalProperties": True,
    "properties": {
        "errors": {"type": "array", "items": STRING},
        "type": {"type": "string", "description": "the sparkdispatch.errors class"},
    },
}


def _json(schema: str | JSONSchema, description: str) -> JSONSchema:
    return {
        "description": description,
        "content": {"application/json": {"schema": _ref(schema) if isinstance(schema, str) else schema}},
    }


def _error(description: str) -> JSONSchema:
    return _json("Errors", description)


def _path_id(name: str) -> JSONSchema:
    pattern, rule = PATH_IDS[name]
    return {
        "name": name,
        "in": "path",
        "required": True,
        "description": rule,
        "schema": {"type": "string", "pattern": pattern.pattern},
    }


# answers any call may get
_ANY = {
    "401": _error("`rest.auth.token` is set and the call lacks it"),
    "403": _error(
        "the Host is none of the master's names (HostRefused, rest.allowed-hosts), or a call that "
        "changes state comes from a web page of another origin (OriginRefused, rest.allowed-origins)"
    ),
}
# answers of a call only the leader serves
_LEADER = {**_ANY, "503": _error("this master does not lead (the body names the leader) or is recovering")}
_STALLED = {"408": _error("the body stopped coming for longer than rest.body-timeout")}
_BODY = {
    "400": _error("the body is not valid JSON or not valid for this call (the body names the field)"),
    **_STALLED,
    "413": _error("the body is larger than rest.max-body-size"),
    "415": _error("the body is not sent as application/json"),
}
_ID = {"400": _error("an id in the path is malformed (the body names it)"), "404": _error("no such resource")}
_QUERY = {"400": _error("a query parameter is malformed (the body names it)")}
_PAGE_PARAMETERS = [
    {
        "name": "limit",
        "in": "query",
        "schema": {"type": "integer", "minimum": 1},
        "description": "the most entries of the page (default and most: rest.list.page-size)",
    },
    {
        "name": "after",
        "in": "query",
        "schema": STRING,
        "description": "the `next` cursor of the previous page",
    },
]
_SESSION = {
    "name": SESSION_HEADER,
    "in": "header",
    "required": True,
    "schema": STRING,
    "description": "the leader session the TaskExecutor registered under",
}


def _restart_strategies(spec: APISpec) -> JSONSchema:
    """The restart strategy union, one closed schema per `type` (apispec cannot see through the field)."""
    choices = []
    for kind, schema in RESTART_SCHEMAS.items():
        name = "Restart" + "".join(part.title() for part in kind.split("-"))
        spec.components.schema(name, schema=schema)
        spec.components.schemas[name]["properties"]["type"] = {"type": "string", "enum": [kind]}
        choices.append(_ref(name))
    return {"oneOf": choices, "nullable": True, "description": "the job's restart strategy, by its `type`"}


def openapi_document() -> dict[str, Any]:
    """The OpenAPI 3 document served at `/openapi.json` (every path also under `/v1`, where an error
    body is `{"errors": [...]}` alone and the rest travels in the `X-SparkDispatch-Error` header)."""
    spec = APISpec(
        title="sparkdispatch master", version=__version__, openapi_version="3.0.3", plugins=[MarshmallowPlugin()]
    )
    for name, schema in _MODEL_SCHEMAS:
        spec.components.schema(name, schema=schema)
    graph = spec.components.schemas["JobGraph"]["properties"]
    graph["restart_strategy"] = _restart_strategies(spec)
    graph["config"] = {
        "type": "object",
        "description": "Spark properties the job's session may set",
        "additionalProperties": {"anyOf": [STRING, {"type": "number"}, {"type": "boolean"}]},
    }
    for shape in ANSWERS:
        if shape.__name__ not in spec.components.schemas:  # a shape another one holds is listed already
            spec.components.schema(shape.__name__, schema=schema_of(shape))
    spec.components.schema("Errors", ERRORS)

    job_id = _path_id("job_id")
    spec.path(
        "/overview",
        operations={
            "get": {
                "summary": "Cluster overview (any master answers, leader or standby)",
                "responses": {"200": _json("Overview", "the overview"), **_ANY},
            }
        },
    )
    spec.path(
        "/jobs",
        operations={
            "get": {
                "summary": "A page of the running and finished jobs, the most recently started first",
                "parameters": _PAGE_PARAMETERS,
                "responses": {"200": _json("JobList", "the jobs"), **_QUERY, **_LEADER},
            },
            "post": {
                "summary": "Submit a JobGraph",
                "requestBody": {"required": True, **_json("JobGraph", "the job")},
                "responses": {
                    "202": _json("Submitted", "accepted and persisted"),
                    "200": _json("Submitted", "the same graph was submitted under this id before"),
                    **_BODY,
                    "409": _error("the job id is taken by another graph"),
                    **_LEADER,
                },
            },
        },
    )
    spec.path(
        "/jobs/overview",
        operations={
            "get": {
                "summary": "Jobs in Flink's JobDetails shape",
                "responses": {"200": _json("FlinkJobList", "the jobs"), **_LEADER},
            }
        },
    )
    spec.path(
        "/jobs/{job_id}",
        parameters=[job_id],
        operations={
            "get": {
                "summary": "A job's details",
                "responses": {"200": _json("JobDetails", "the job"), **_ID, **_LEADER},
            },
            "patch": {
                "summary": "Cancel a job",
                "parameters": [{"name": "mode", "in": "query", "schema": {"type": "string", "enum": ["cancel"]}}],
                "responses": {
                    "202": _json("Empty", "cancelling (or cancelled already)"),
                    **{**_ID, "400": _error("a malformed job id, or a mode other than `cancel`")},
                    "409": _error("the job already ended otherwise"),
                    **_LEADER,
                },
            },
        },
    )
    spec.path(
        "/jobs/{job_id}/execution-result",
        parameters=[job_id],
        operations={
            "get": {
                "summary": "IN_PROGRESS, or COMPLETED with the JobResult (waits up to rest.execution-result.long-poll)",
                "responses": {"200": _json("ExecutionResult", "the result"), **_ID, **_LEADER},
            }
        },
    )
    spec.path(
        "/jobs/{job_id}/progress",
        parameters=[job_id],
        operations={
            "get": {
                "summary": (
                    "Every vertex's outcome so far (a VertexResult) and the size of each subtask's latest "
                    "attempt log, with the job's status: one call per poll for all the tasks following the job"
                ),
                "responses": {"200": _json("JobProgress", "the job's progress"), **_ID, **_LEADER},
            }
        },
    )
    spec.path(
        "/jobs/{job_id}/repair",
        parameters=[job_id],
        operations={
            "post": {
                "summary": "Repair an ended job: run the vertices named, and their consumers, again under the same id, "
                "reusing the other vertices' results",
                "requestBody": {
                    "required": True,
                    **_json(
                        {
                            "type": "object",
                            "required": ["vertices"],
                            "properties": {"vertices": {"type": "array", "minItems": 1, "items": STRING}},
                        },
                        "what to run again",
                    ),
                },
                "responses": {
                    "202": _json("RepairAnswer", "the repair is persisted and runs"),
                    "200": _json("RepairAnswer", "the job already runs a repair covering these vertices"),
                    **{**_BODY, **_ID, "400": _error("a malformed job id or body, or a vertex the job does not have")},
                    "409": _error(
                        "the job runs (`running`: ask again once it ends), or it cannot be repaired "
                        "(its graph or results are gone)"
                    ),
                    **_LEADER,
                },
            }
        },
    )
    vertex_id = {"name": "vertex_id", "in": "path", "required": True, "schema": STRING}
    spec.path(
        "/jobs/{job_id}/vertices/{vertex_id}/log",
        parameters=[job_id, vertex_id],
        operations={
            "get": {
                "summary": (
                    "A piece of one attempt's log (what its task function printed or logged), from a byte offset"
                ),
                "parameters": [
                    {"name": name, "in": "query", "schema": {"type": "integer", "minimum": 0}, "description": text}
                    for name, text in (
                        ("subtask", "the subtask (default 0)"),
                        ("attempt", "the attempt (default: the latest)"),
                        ("offset", "the byte to start at (default 0); the answer's next_offset is the next"),
                    )
                ],
                "responses": {
                    "200": _json("AttemptLog", "the log from offset (at most 1 MiB)"),
                    **{**_ID, "400": _error("a malformed id or query parameter")},
                    **_LEADER,
                },
            }
        },
    )
    spec.path(
        "/jobs/{job_id}/vertices/{vertex_id}",
        parameters=[job_id, vertex_id],
        operations={
            "get": {
                "summary": "One vertex's outcome so far (a VertexResult) and its job's status; the JobResult's "
                "once the job ended",
                "responses": {"200": _json("VertexOutcome", "the vertex"), **_ID, **_LEADER},
            }
        },
    )
    spec.path(
        "/taskmanagers",
        operations={
            "get": {
                "summary": "A page of the TaskExecutors and their slots, by id",
                "parameters": _PAGE_PARAMETERS,
                "responses": {"200": _json("TaskManagerList", "the TaskExecutors"), **_QUERY, **_LEADER},
            }
        },
    )
    spec.path(
        "/artifacts",
        operations={
            "post": {
                "summary": "Upload user code (.py or .zip) for a JobGraph's artifacts, or a wheel for its environment",
                "requestBody": {
                    "required": True,
                    "content": {
                        "multipart/form-data": {
                            "schema": {
                                "type": "object",
                                "required": ["file"],
                                "properties": {"file": {"type": "string", "format": "binary"}},
                            }
                        }
                    },
                },
                "responses": {
                    "201": _json("Artifact", "stored under its key"),
                    "400": _error("not multipart, no `file` field, or not a .py, .zip or .whl"),
                    **_STALLED,
                    "413": _error("larger than blob.max-size"),
                    **_LEADER,
                },
            }
        },
    )
    spec.path(
        "/artifacts/{key}",
        parameters=[{"name": "key", "in": "path", "required": True, "schema": STRING}],
        operations={
            "get": {
                "summary": "An artifact's bytes, checked against its key (TaskExecutors fetch a job's code here); "
                "the header X-SparkDispatch-Artifact-Name names its file",
                "responses": {
                    "200": {
                        "description": "the file",
                        "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
                    },
                    "404": _error("no artifact with this key (or not a key)"),
                    "500": _error("the stored file no longer matches its key: upload it again"),
                    **_LEADER,
                },
            }
        },
    )
    _task_executor_paths(spec)
    return spec.to_dict()


def _task_executor_paths(spec: APISpec) -> None:
    """The TaskExecutor protocol (docs/internals.md), fenced by the leader session."""
    fenced = {**_BODY, "409": _error("another leader session (fencing token mismatch)"), **_LEADER}
    task_executor_id = _path_id("task_executor_id")
    tag = ["TaskExecutor protocol"]
    spec.path(
        "/taskexecutors/leader-session",
        operations={
            "get": {
                "summary": "The leader session to register under (for TaskExecutors of high-availability.mode none)",
                "tags": tag,
                "responses": {"200": _json("LeaderSession", "the session this master leads under"), **_LEADER},
            }
        },
    )
    spec.path(
        "/taskexecutors",
        operations={
            "post": {
                "summary": "Register a TaskExecutor",
                "tags": tag,
                "parameters": [_SESSION],
                "requestBody": {"required": True, **_json("TaskExecutorRegistration", "the TaskExecutor")},
                "responses": {"200": _json("RegistrationAck", "registered"), **fenced},
            }
        },
    )
    spec.path(
        "/taskexecutors/{task_executor_id}/heartbeat",
        parameters=[task_executor_id],
        operations={
            "post": {
                "summary": "A TaskExecutor's heartbeat: its slots, executions and the jobs whose results it keeps",
                "tags": tag,
                "parameters": [_SESSION],
                "requestBody": {"required": True, **_json("Heartbeat", "the heartbeat")},
                "responses": {
                    "200": _json("HeartbeatAnswer", "received; the kept results of these jobs may go"),
                    **_ID,
                    **fenced,
                    "404": _error("the TaskExecutor is not registered: register again"),
                },
            }
        },
    )
    spec.path(
        "/taskexecutors/{task_executor_id}/unregister",
        parameters=[task_executor_id],
        operations={
            "post": {
                "summary": "A stopping TaskExecutor leaves at once",
                "tags": tag,
                "parameters": [_SESSION],
                "requestBody": {
                    "required": True,
                    **_json(
                        {
                            "type": "object",
                            "required": ["registration_id"],
                            "properties": {"registration_id": {"type": "string", "minLength": 1}},
                        },
                        "the registration it ends",
                    ),
                },
                "responses": {"200": _json("Unregistered", "whether that registration was removed"), **_ID, **fenced},
            }
        },
    )
    spec.path(
        "/jobs/{job_id}/executions/{execution_id}/state",
        parameters=[_path_id("job_id"), _path_id("execution_id")],
        operations={
            "post": {
                "summary": "A TaskExecutor's report on one execution",
                "tags": tag,
                "parameters": [_SESSION],
                "requestBody": {"required": True, **_json("ExecutionStateUpdate", "the new state")},
                "responses": {
                    "200": _json("Empty", "applied"),
                    **_ID,
                    **fenced,
                    "404": _error("the job does not run here"),
                },
            }
        },
    )
