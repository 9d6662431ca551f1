"""The job model and the wire forms every component shares; each class stands with its JSON form.

`states` (a job's and an attempt's lifecycles), `restart` (restart strategies), `job_graph` (the
JobGraph and its vertices), `job_result` (the JobResult, a vertex's outcome, a failure), all on the
strict marshmallow base of `schema`; `spark_conf` (the Spark settings a job may carry),
`environment` (the Python packages a job or a vertex brings), `protocol`
(the master <-> TaskExecutor messages), `snapshot` (read-only pictures of a job), `repair` (what a
repair runs again), `artifacts` (user code as stored) and `rest_shapes` (the REST API's answers);
a repair and every answer are shapes of `codec`, which derives a dataclass's JSON form, parser and
schema from its fields. The model imports no component.
"""
