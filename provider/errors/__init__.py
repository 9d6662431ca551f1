"""Every error sparkdispatch raises on purpose, and its REST form (the modules of this package group
them by concern; import them from here).

::

    SparkDispatchError
    ├── ConfigurationError            a configuration key is unknown or its value is bad
    ├── InvalidJobGraph               a JobGraph failed validation (names the field)
    │   └── JobTooLarge               a JobGraph over a limit on the whole job (`jobgraph.max-subtasks`)
    ├── InvalidRequest                a request body other than a JobGraph failed validation
    │   └── InvalidShape              an answer or a stored record does not fit its declared shape (names the field)
    ├── IllegalStateTransition        a job or execution state change Flink's lifecycle forbids
    ├── UnknownJob                    no job with that id
    ├── DuplicateJobSubmission        the job id is taken (running with another graph, or terminated)
    ├── JobAlreadyTerminated          the job finished or failed before it could be cancelled
    ├── FencingTokenMismatch          a call carried another leader session than the current one
    │   └── StaleExecution            a report names an attempt the JobMaster no longer runs
    ├── NoLeader                      no master leads at the moment
    ├── SlotRequestTimeout            no slot could be found in time
    ├── UnknownTaskExecutor           the TaskExecutor is not (or no longer) registered
    ├── SlotProcessLost               a TaskExecutor's slot process died under a task, or did not start
    ├── EntrypointNotFound            a task's `module:function` entrypoint does not exist in its code
    ├── EnvironmentBuildFailed        a job's Python environment could not be resolved or built
    ├── StoreError                    an HA store refused or failed a read or write
    │   ├── StoreUnavailable          a store did not answer for now (ZooKeeper connection loss); retry
    │   ├── JobResultEntryExists      a JobResult for that job is stored already
    │   ├── NoSuchJobResult           no JobResult stored for that job
    │   └── BlobError                 a user-code blob cannot be stored or read
    │       ├── BlobNotFound
    │       ├── BlobTooLarge
    │       └── CorruptedBlob         the blob's content does not hash to its key
    ├── RequestTooLarge               a request body is over `rest.max-body-size`
    ├── RequestTimeout                a request body stalled longer than `rest.body-timeout`
    ├── UnsupportedMediaType          a JSON body without `Content-Type: application/json`
    ├── Unauthorized                  a REST call lacks the configured token
    ├── CsrfRefused                   a call made with the web UI's session cookie lacks its CSRF token
    ├── HostRefused                   a call's `Host` is none of the master's names (DNS rebinding)
    ├── OriginRefused                 a state-changing call from another site's web page
    ├── TooManyLoginAttempts          too many failed logins from one address; retry after `retry_after` s
    ├── RouteNotFound                 no REST resource at that path
    ├── MethodNotAllowed              the path does not take that HTTP method
    ├── InternalError                 the master failed on a bug; the body names the exception
    ├── ConnectServerError            a TaskExecutor's Spark Connect server failed to start or serve
    ├── MissingExtra                  a command needs packages of an extra that is not installed
    └── ServiceUnavailable            the master cannot answer now (standby, starting, stopping)
        ├── LeadershipLost            this process is no longer the leader
        └── RecoveryInProgress        a new leader is still recovering its jobs; retry after `retry_after` s

Each class carries the HTTP status the REST endpoint answers it with, so one middleware maps
them all. On the wire an error is `{"errors": [readable messages], "type": "<class name>",
...the class's fields}` (`to_body()`); `error_from_body(status, text)` turns such an answer back
into the same class with the same fields on every client, as kazoo's code → class registry
does for ZooKeeper's error codes. An answer that names no known class (a proxy's page, an older
master) becomes a plain `SparkDispatchError` carrying the status and the text.

A class declares its fields once, as class-level annotations (`job_id: str`); they follow its
base class's unless it is defined with `own_fields_only=True`. `to_body()` and `from_fields()`
derive from them, and every class of this package registers itself under its name in
`ERROR_TYPES` as it is defined.
"""

from sparkdispatch.errors.base import ERROR_TYPES, SparkDispatchError
from sparkdispatch.errors.cluster import (
    FencingTokenMismatch,
    StaleExecution,
    NoLeader,
    SlotRequestTimeout,
    UnknownTaskExecutor,
    SlotProcessLost,
    ConnectServerError,
    ServiceUnavailable,
    LeadershipLost,
    RecoveryInProgress,
)
from sparkdispatch.errors.configuration import (
    ConfigurationError,
    TlsError,
    MissingExtra,
)
from sparkdispatch.errors.http import (
    RequestTooLarge,
    RequestTimeout,
    UnsupportedMediaType,
    Unauthorized,
    Forbidden,
    CsrfRefused,
    HostRefused,
    OriginRefused,
    TooManyLoginAttempts,
    RouteNotFound,
    MethodNotAllowed,
    InternalError,
)
from sparkdispatch.errors.job import (
    InvalidJobGraph,
    JobTooLarge,
    InvalidRequest,
    InvalidShape,
    IllegalStateTransition,
    UnknownJob,
    DuplicateJobSubmission,
    JobAlreadyTerminated,
    RepairNotPossible,
    EntrypointNotFound,
    EnvironmentBuildFailed,
)
from sparkdispatch.errors.storage import (
    StoreError,
    StoreUnavailable,
    JobResultEntryExists,
    NoSuchJobResult,
    BlobError,
    BlobNotFound,
    BlobTooLarge,
    CorruptedBlob,
)
from sparkdispatch.errors.wire import ERROR_HEADER, error_from_body, error_header

__all__ = [
    "BlobError",
    "BlobNotFound",
    "BlobTooLarge",
    "ConfigurationError",
    "ConnectServerError",
    "CorruptedBlob",
    "CsrfRefused",
    "DuplicateJobSubmission",
    "ERROR_HEADER",
    "ERROR_TYPES",
    "EntrypointNotFound",
    "EnvironmentBuildFailed",
    "FencingTokenMismatch",
    "Forbidden",
    "HostRefused",
    "IllegalStateTransition",
    "InternalError",
    "InvalidJobGraph",
    "InvalidRequest",
    "InvalidShape",
    "JobAlreadyTerminated",
    "JobResultEntryExists",
    "JobTooLarge",
    "LeadershipLost",
    "MethodNotAllowed",
    "MissingExtra",
    "NoLeader",
    "NoSuchJobResult",
    "OriginRefused",
    "RecoveryInProgress",
    "RepairNotPossible",
    "RequestTimeout",
    "RequestTooLarge",
    "RouteNotFound",
    "ServiceUnavailable",
    "SlotProcessLost",
    "SlotRequestTimeout",
    "SparkDispatchError",
    "StaleExecution",
    "StoreError",
    "StoreUnavailable",
    "TlsError",
    "TooManyLoginAttempts",
    "Unauthorized",
    "UnknownJob",
    "UnknownTaskExecutor",
    "UnsupportedMediaType",
    "error_from_body",
    "error_header",
]
