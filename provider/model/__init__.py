"""The job model and the wire forms every component shares; each class stands with its JSON form.

`states` (a job's and an attempt's lifecycles), `restart` (restart strategies), `job_graph` (the
JobGraph and its vertices), `job_result` (the JobResult, a vertex's outcome, a failure), all on the
strict marshmallow base of `schema`; `spark_conf` (the Spark settings a job may carry), `protocol`
(the master <-> TaskExecutor messages), `snapshot` (read-only pictures of a job), `repair` (what a
repair runs again) and `artifacts` (user code as stored). The model imports no component.
"""
