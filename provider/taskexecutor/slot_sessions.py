"""A slot process's Spark Connect sessions: each of its own on the server (`new_session`, under
`SESSION_USER`), failing fast once the server is gone, the server's own id of one, the job's code
added to one (`add_code`), and the one pyspark's `getActiveSession()` gives (`make_active`).
Imports pyspark only when a session is made."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from sparkdispatch.taskexecutor.artifact_cache import hashes_to
from sparkdispatch.taskexecutor.connect_url import with_parameters
from sparkdispatch.taskexecutor.slot_protocol import SESSION_USER

if TYPE_CHECKING:
    from pyspark.sql.connect.session import SparkSession

log = logging.getLogger(__name__)

#: Told to the client of every session: a dead server fails an action after ~1.4 s instead of
#: pyspark's default of retrying for 10 minutes.
RETRY_MAX_RETRIES = 3
RETRY_INITIAL_BACKOFF_MS = 100
RETRY_MAX_BACKOFF_MS = 1000


def session_url(connect_url: str) -> str:
    """A new Connect session's URL on the server at `connect_url` (`sc://host:port/;token=…`)."""
    return with_parameters(connect_url, session_id=str(uuid.uuid4()), user_id=SESSION_USER)


def new_session(connect_url: str) -> SparkSession:
    """A session of its own on the Connect server, whose calls fail fast once the server is gone.

    Its executions are not reattachable. Reattaching resumes a result stream broken on the way, and
    costs each action a release call and the server's buffering of its results (about 13 ms of a
    trivial action's 89, bench/README.md, "P1"). The server is the TaskExecutor's own, on
    127.0.0.1, and lives with it: a stream breaks only when the server is gone, and then the
    attempt fails and its restart is the recovery.

    Its channel starts no thread of its own for a call (`SlotChannel`).
    """
    from pyspark.sql.connect.client.retries import DefaultPolicy
    from pyspark.sql.connect.session import SparkSession

    from sparkdispatch.taskexecutor.slot_channel import SlotChannel

    session = SparkSession.builder.channelBuilder(SlotChannel(session_url(connect_url))).create()
    session.client.disable_reattachable_execute()
    session.client.set_retry_policies(
        [
            DefaultPolicy(
                max_retries=RETRY_MAX_RETRIES,
                initial_backoff=RETRY_INITIAL_BACKOFF_MS,
                backoff_multiplier=2.0,
                max_backoff=RETRY_MAX_BACKOFF_MS,
            )
        ]
    )
    return session


def add_code(session: SparkSession, artifact_paths: Sequence[str]) -> bool:
    """Add a job's code, its artifact files, to a session made ahead for the next job of that code,
    when every file still holds the bytes its cache directory is named after (`<sha256>/<name>`).

    Between attempts the TaskExecutor's cache may drop a file or, since jobs run as the
    TaskExecutor's user, another job's code may have rewritten it: then nothing is added (False),
    and the job's first task adds the files the TaskExecutor checked for it, as it would anyway.
    """
    for name in artifact_paths:
        path = Path(name)
        try:
            intact = hashes_to(path, path.parent.name)
        except FileNotFoundError:
            log.info("the job's code %s left the TaskExecutor's cache; its next job's first task adds it", path)
            return False
        if not intact:
            log.warning("the job's code %s changed since its last task; its next job's first task adds it", path)
            return False
    session.addArtifacts(*artifact_paths, pyfile=True)
    return True


def server_session_id(session: SparkSession) -> str | None:
    """The server's own id of a Connect session (Spark names its Python workers' daemon by it), which
    the server tells in each answer: after one small call if the session has made none yet."""
    client = session.client
    if getattr(client, "_server_session_id", None) is None:
        try:
            session.version  # noqa: B018 - a call whose answer carries the id
        except Exception as exc:  # noqa: BLE001 - only a daemon left for the server's life is at stake
            log.warning("could not learn the server's id of session %s: %s", session.session_id, exc)
    known = getattr(client, "_server_session_id", None)  # pyspark 4.x keeps it there
    return str(known) if known else None


def make_active(session: SparkSession) -> None:
    """Make `session` the one `SparkSession.getActiveSession()` and `builder.getOrCreate()` give.

    pyspark sets them only for a process's first session (and `create()` only where none is
    set), so a later job's session, or one made ahead in another thread, needs this.
    """
    cls = type(session)
    with cls._lock:
        cls._default_session = session
    cls._active_session.session = session
