"""The web UI's HTML: small functions that return page text; every value from the data goes through `_e`.

Pages are built from the REST API's shapes (`sparkdispatch.model.rest_shapes`, docs/rest-api.md),
so the server renders exactly what the scripts in ``ui/`` later refresh from the same API.
"""

from __future__ import annotations

import html
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import urlencode

from sparkdispatch.errors import SparkDispatchError, UnknownJob
from sparkdispatch.model.job_result import Failure, JobResult, VertexResult
from sparkdispatch.model.repair import Repair
from sparkdispatch.model.rest_shapes import (
    AttemptLog,
    JobDetails,
    JobSummary,
    Overview,
    SubtaskDetails,
    TaskManager,
    TaskManagerSlot,
    VertexDetails,
)
from sparkdispatch.model.states import JobStatus
from sparkdispatch.rest.access import Principal

RECENT_JOBS_SHOWN = 50
# what the scripts stop polling at, handed to them on every page (`data-terminal-statuses`)
TERMINAL_JOB_STATUSES = " ".join(status.value for status in JobStatus if status.is_terminal)


@dataclass(frozen=True)
class JobPage:
    """A job as its page shows it: its details (`GET /jobs/{id}`), and its JobResult once it ended."""

    details: JobDetails
    result: JobResult | None = None


def _e(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def render_page(
    *,
    title: str,
    root: str,
    page: str,
    overview: Overview | None,
    body: str,
    data: Mapping[str, str] | None = None,
    csrf: str | None = None,
    user: Principal | None = None,
) -> str:
    """The layout around a page's ``body``; ``root`` is the relative path back to ``/ui/``.

    ``csrf``: the browser session's CSRF token (ui_auth.py), for the page's state-changing calls;
    with it the page offers to log out. ``user``: who is logged in, named beside it."""
    attributes = "".join(f' data-{name}="{_e(value)}"' for name, value in (data or {}).items())
    session = f'<meta name="csrf-token" content="{_e(csrf)}">\n' if csrf else ""
    logout = f'<a class="logout" href="{root}logout">Log out</a>' if csrf else ""
    if user is not None:
        logout = (
            f'<span class="user" id="user">{_e(user.name)} <span class="role">{_e(user.role.value)}</span>'
            f"</span>{logout}"
        )

    script = f'<script src="{root}static/{page}.js" defer></script>' if page != "error" else ""
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_e(title)} · sparkdispatch</title>
<link rel="icon" href="data:,">
{session}<link rel="stylesheet" href="{root}static/ui.css">
<script src="{root}static/common.js" defer></script>
{script}
</head>
<body data-page="{_e(page)}" data-root="{root}" data-api="{root}../"
      data-terminal-statuses="{_e(TERMINAL_JOB_STATUSES)}"{attributes}>
<header class="topbar">
  <a class="brand" href="{root}">sparkdispatch</a>
  <nav>
    <a href="{root}"{' class="active"' if page == "overview" else ""}>Overview</a>
    <a href="{root}taskmanagers"{' class="active"' if page == "taskmanagers" else ""}>TaskManagers</a>
  </nav>
  <span id="connection" class="connection" hidden>connection lost, retrying…</span>
  {logout}
</header>
{render_leader_banner(overview)}
<main>
{body}
</main>
</body>
</html>
"""


def leader_url(overview: Overview | None, path: str) -> str | None:
    """``path`` on the leading master when this one is a standby that knows an http(s) leader."""
    if overview is None or overview.is_leader:
        return None
    leader = overview.leader or ""
    if not leader.startswith(("http://", "https://")):
        return None  # never turn an odd address (javascript:, ...) into a link
    return leader.rstrip("/") + path


def render_error_page(
    exc: SparkDispatchError, *, root: str, overview: Overview | None, elsewhere: str | None = None
) -> str:
    """The page saying why a page cannot be shown; ``elsewhere`` links to it on the leader."""
    if isinstance(exc, UnknownJob):
        title = "Job not found"
        text = f"No job with id {_e(exc.job_id)} is known to this master."
    else:
        title = "Not available"
        text = _e(exc.message)
    leader_link = f'<p><a href="{_e(elsewhere)}">This page on the leading master</a></p>' if elsewhere else ""
    body = (
        f'<section class="panel error-page"><h1>{_e(title)}</h1><p>{text}</p>{leader_link}'
        f'<p><a href="{root}">Back to the overview</a></p></section>'
    )
    return render_page(title=title, root=root, page="error", overview=overview, body=body)


def render_leader_banner(overview: Overview | None) -> str:
    """Nothing on the leader; on a standby, which master leads (with a link to its UI)."""
    if overview is None or overview.is_leader:
        return '<div id="leader-banner" class="banner" hidden></div>'
    leader = overview.leader
    href = leader_url(overview, "/ui/")
    if not leader:
        text = "This master is a standby and no master leads at the moment."
    elif href:
        text = f'This master is a standby. The leading master is <a href="{_e(href)}">{_e(leader)}</a>.'
    else:
        text = f"This master is a standby. The leading master is {_e(leader)}."
    return f'<div id="leader-banner" class="banner">{text}</div>'


def _badge(state: str) -> str:
    state_text = _e(state or "UNKNOWN")
    return f'<span class="badge state-{state_text}">{state_text}</span>'


def format_time(epoch_ms: object) -> str:
    """Epoch milliseconds as UTC ``YYYY-MM-DD HH:MM:SS``; ``—`` when absent (None or -1)."""
    if not isinstance(epoch_ms, (int, float)) or epoch_ms < 0:
        return "—"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(epoch_ms / 1000))


def format_duration(duration_ms: object) -> str:
    """``850 ms``, ``4.2 s``, ``3 min 02 s``, ``1 h 05 min``; ``—`` when absent."""
    if not isinstance(duration_ms, (int, float)) or duration_ms < 0:
        return "—"
    if duration_ms < 1000:
        return f"{int(duration_ms)} ms"
    seconds = duration_ms / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def _job_duration(start: int, end: int | None, duration_ms: int | None = None) -> float | None:
    """The job's duration: `duration_ms` when known, else from its times (up to now while it runs)."""
    if duration_ms is not None:
        return duration_ms
    if start < 0:
        return None
    if end is not None and end >= 0:
        return end - start
    return time.time() * 1000 - start


def _job_link(root: str, job_id: object, text: object | None = None) -> str:
    return f'<a class="mono" href="{root}jobs/{_e(job_id)}">{_e(job_id if text is None else text)}</a>'


def _table(headers: Sequence[str], rows: Iterable[str], *, body_id: str, empty: str) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join(rows) or f'<tr class="empty"><td colspan="{len(headers)}">{_e(empty)}</td></tr>'
    return f'<table class="grid"><thead><tr>{head}</tr></thead><tbody id="{body_id}">{body}</tbody></table>'


# Overview ------------------------------------------------------------------------------------


def render_overview(
    overview: Overview,
    jobs: Sequence[JobSummary],
    taskmanagers: Sequence[TaskManager],
    *,
    unavailable: str | None = None,
) -> str:
    """The overview; ``unavailable`` says why the job and TaskExecutor lists are empty here."""
    slots_total = overview.slots_total
    slots_free = overview.slots_available
    if overview.is_leader:
        leader_text = "this master"
    else:
        leader_text = _e(overview.leader or "none")
    cards = [
        ("Leader", leader_text, "leader"),
        ("TaskExecutors", _e(overview.taskmanagers), "taskmanagers"),
        ("Slots used / total", f"{_e(slots_total - slots_free)} / {_e(slots_total)}", "slots"),
        ("Slots free", _e(slots_free), "slots-free"),
        ("Running jobs", _e(overview.jobs_running), "jobs-running"),
        ("Finished", _e(overview.jobs_finished), "jobs-finished"),
        ("Failed", _e(overview.jobs_failed), "jobs-failed"),
        ("Cancelled", _e(overview.jobs_cancelled), "jobs-cancelled"),
    ]
    card_html = "".join(
        f'<div class="card"><div class="card-label">{_e(label)}</div>'
        f'<div class="card-value" id="ov-{key}">{value}</div></div>'
        for label, value, key in cards
    )
    note = f'<p class="empty unavailable">{_e(unavailable)}</p>' if unavailable else ""
    return (
        f'<h1>Cluster overview</h1><section class="cards">{card_html}</section>'
        f'<section class="panel"><h2>Jobs</h2>{note}{render_job_list(jobs)}</section>'
        f'<section class="panel"><h2>TaskExecutors</h2>{note}{render_taskmanager_summary(taskmanagers)}</section>'
    )


def render_job_list(jobs: Sequence[JobSummary], *, root: str = "./") -> str:
    """Most recent first, at most RECENT_JOBS_SHOWN."""
    recent = sorted(jobs, key=lambda j: j.start_time, reverse=True)[:RECENT_JOBS_SHOWN]
    rows = (
        f'<tr data-job-id="{_e(j.id)}"><td>{_job_link(root, j.id, j.name or j.id)}</td>'
        f"<td>{_job_link(root, j.id)}</td><td>{_badge(j.status.value)}</td>"
        f"<td>{format_time(j.start_time)}</td><td>{format_time(j.end_time)}</td>"
        f"<td>{format_duration(_job_duration(j.start_time, j.end_time, j.duration_ms))}</td></tr>"
        for j in recent
    )
    return _table(
        ["Name", "Job id", "Status", "Start (UTC)", "End (UTC)", "Duration"],
        rows,
        body_id="jobs-body",
        empty="No jobs yet.",
    )


def render_taskmanager_summary(taskmanagers: Sequence[TaskManager]) -> str:
    rows = (
        f'<tr data-tm-id="{_e(tm.id)}"><td class="mono">{_e(tm.id)}</td><td>{_e(tm.hostname)}</td>'
        f"<td>{_e(tm.slots_free)} / {_e(tm.slots_total)}</td>"
        f"<td>{format_time(tm.last_heartbeat)}</td></tr>"
        for tm in taskmanagers
    )
    return _table(
        ["TaskExecutor", "Host", "Slots free / total", "Last heartbeat (UTC)"],
        rows,
        body_id="tm-body",
        empty="No TaskExecutor is registered.",
    )


# TaskManagers --------------------------------------------------------------------------------


def render_taskmanagers(taskmanagers: Sequence[TaskManager]) -> str:
    if not taskmanagers:
        cards = '<p class="empty">No TaskExecutor is registered.</p>'
    else:
        cards = "".join(render_taskmanager_card(tm) for tm in taskmanagers)
    return f'<h1>TaskManagers</h1><div id="tm-list">{cards}</div>'


def render_taskmanager_card(tm: TaskManager) -> str:
    slots = "".join(_render_slot(slot) for slot in tm.slots)
    return (
        f'<section class="panel tm" data-tm-id="{_e(tm.id)}">'
        f'<h2 class="mono">{_e(tm.id)}</h2>'
        f'<dl class="facts"><dt>Host</dt><dd>{_e(tm.hostname)}</dd>'
        f"<dt>Slots free / total</dt><dd>{_e(tm.slots_free)} / {_e(tm.slots_total)}</dd>"
        f"<dt>Last heartbeat (UTC)</dt><dd>{format_time(tm.last_heartbeat)}</dd></dl>"
        f'<div class="slots">{slots}</div></section>'
    )


def _render_slot(slot: TaskManagerSlot) -> str:
    job_id = slot.job_id
    if job_id:
        content = f'<span class="slot-job">{_job_link("./", job_id)}</span>'
        css = "slot busy"
    else:
        content = '<span class="slot-free">free</span>'
        css = "slot free"
    title = f' title="allocation {_e(slot.allocation_id)}"' if slot.allocation_id else ""
    return f'<div class="{css}"{title}><span class="slot-index">slot {_e(slot.index)}</span>{content}</div>'


# Job -----------------------------------------------------------------------------------------


def render_job(page: JobPage, *, may_cancel: bool = True) -> str:
    """The job page's body; `may_cancel` False (a viewer's page) leaves the cancel button out."""
    job, result = page.details, page.result
    vertices = job.vertices
    cancel = (
        '<button id="cancel-job" type="button" class="danger">Cancel job</button>'
        if may_cancel and not job.status.is_terminal
        else ""
    )
    header = (
        f'<section class="job-head"><h1 id="job-name">{_e(job.name or job.id)}</h1>{cancel}'
        f'<dl class="facts"><dt>Job id</dt><dd class="mono" id="job-id">{_e(job.id)}</dd>'
        f'<dt>Status</dt><dd id="job-status">{_badge(job.status.value)}</dd>'
        f'<dt>Start (UTC)</dt><dd id="job-start">{format_time(job.start_time)}</dd>'
        f'<dt>End (UTC)</dt><dd id="job-end">{format_time(job.end_time)}</dd>'
        f'<dt>Duration</dt><dd id="job-duration">{format_duration(_job_duration(job.start_time, job.end_time))}</dd>'
        "</dl></section>"
    )
    graph = (
        f'<section class="panel"><h2>Graph</h2><div class="graph">{render_graph_svg(vertices, result)}</div></section>'
    )
    vertex_table = f'<section class="panel"><h2>Vertices</h2>{render_vertex_table(vertices, result)}</section>'
    subtasks = f'<section class="panel"><h2>Subtasks</h2>{render_subtask_table(vertices, job.id)}</section>'
    failures = f'<div id="job-failures">{render_failures(result)}</div>'
    repairs = f'<div id="job-repairs">{render_repairs(job.repairs)}</div>'
    return header + failures + repairs + graph + vertex_table + subtasks


def render_repairs(repairs: Sequence[Repair]) -> str:
    """The job's repairs (`POST /jobs/{id}/repair`), newest first; nothing for a job never repaired."""
    if not repairs:
        return ""
    rows = (
        f'<tr><td>{_e(r.number)}</td><td class="mono">{_e(", ".join(r.requested))}</td>'
        f'<td class="mono">{_e(", ".join(r.vertices))}</td>'
        f"<td>{format_time(r.requested_at)}</td><td>{_badge(r.status.value if r.status else 'RUNNING')}</td></tr>"
        for r in reversed(repairs)
    )
    return (
        '<section class="panel"><h2>Repairs</h2>'
        + _table(
            ["Repair", "Asked for", "Ran again", "Requested (UTC)", "Outcome"], rows, body_id="repairs-body", empty=""
        )
        + "</section>"
    )


def log_link(job_id: str, vertex_id: str, subtask: SubtaskDetails) -> str:
    """A link from the job page to one subtask attempt's log page."""
    query = urlencode({"vertex": vertex_id, "subtask": subtask.index, "attempt": subtask.attempt})
    return f'<a href="{_e(job_id)}/log?{_e(query)}">log</a>'


def render_log_page(job_id: str, vertex_id: str, subtask: int, attempt: int | None, piece: AttemptLog | None) -> str:
    """One attempt's log; `piece` is the log endpoint's answer (None: no log yet). The page's
    script follows the log from `next_offset` while the job runs."""
    shown = attempt + 1 if attempt is not None else "latest"
    text = "" if piece is None else piece.text
    truncated = piece is not None and piece.offset > 0
    return (
        f'<section class="job-head"><h1>Log of {_e(vertex_id)}[{subtask}], attempt {_e(shown)}</h1>'
        f'<dl class="facts"><dt>Job</dt><dd class="mono"><a href="../{_e(job_id)}">{_e(job_id)}</a></dd>'
        f'<dt>Vertex state</dt><dd id="log-state">{_badge(piece.vertex_state.value if piece else "—")}</dd></dl>'
        f'</section><section class="panel">'
        + ('<p class="empty">Earlier output is left out.</p>' if truncated else "")
        + (
            f'<pre class="log" id="log-text">{_e(text)}</pre>'
            if piece is not None
            else '<pre class="log" id="log-text"></pre><p class="empty" id="log-empty">No output yet.</p>'
        )
        + "</section>"
    )


def attempt_number(subtask: SubtaskDetails) -> int:
    """The REST API counts attempts from 0 (as Flink's does); people count from 1 (as its UI)."""
    return subtask.attempt + 1


def attempts_label(vertex: VertexDetails, vertex_result: VertexResult | None) -> str:
    """``attempts N`` from the JobResult once there is one, else the latest live ``attempt N``."""
    if vertex_result is not None:
        return f"attempts {vertex_result.attempts}"
    numbers = [attempt_number(subtask) for subtask in vertex.subtasks]
    return f"attempt {max(numbers)}" if numbers else "attempt —"


def _vertex_results(result: JobResult | None) -> Mapping[str, VertexResult]:
    return result.vertices if result is not None else {}


def render_vertex_table(vertices: Sequence[VertexDetails], result: JobResult | None) -> str:
    results = _vertex_results(result)
    rows = []
    for vertex in vertices:
        vr = results.get(vertex.id)
        rows.append(
            f'<tr data-vertex="{_e(vertex.id)}"><td class="mono">{_e(vertex.id)}</td>'
            f"<td>{_badge(vertex.state.value)}</td><td>{_e(vertex.parallelism)}</td>"
            f"<td>{_e(attempts_label(vertex, vr))}</td>"
            f"<td>{_e('—' if vr is None or vr.rows is None else vr.rows)}</td>"
            f'<td class="mono path">{_e(vr is not None and vr.result_path or "—")}</td></tr>'
        )
    return _table(
        ["Vertex", "State", "Parallelism", "Attempts", "Rows", "Result path"],
        rows,
        body_id="vertices-body",
        empty="This job has no vertices.",
    )


def render_subtask_table(vertices: Sequence[VertexDetails], job_id: str = "") -> str:
    rows = (
        f'<tr><td class="mono">{_e(vertex.id)}</td><td>{_e(subtask.index)}</td>'
        f"<td>{_badge(subtask.state.value)}</td><td>{_e(attempt_number(subtask))}</td>"
        f'<td class="mono">{_e(subtask.taskmanager or "—")}</td>'
        f"<td>{log_link(job_id, vertex.id, subtask)}</td></tr>"
        for vertex in vertices
        for subtask in vertex.subtasks
    )
    return _table(
        ["Vertex", "Subtask", "State", "Attempt", "TaskExecutor", "Output"],
        rows,
        body_id="subtasks-body",
        empty="No subtasks yet.",
    )


def render_failures(result: JobResult | None) -> str:
    """The job's root cause and each failed vertex's last failure, tracebacks included."""
    if result is None:
        return ""
    blocks = []
    if result.failure is not None:
        blocks.append(_render_failure("Root cause", result.failure))
    for vertex_id, vr in result.vertices.items():
        if vr.failure is not None:
            blocks.append(_render_failure(f"Vertex {vertex_id}", vr.failure))
    if not blocks:
        return ""
    return '<section class="panel failure"><h2>Failure</h2>' + "".join(blocks) + "</section>"


def _render_failure(title: str, failure: Failure) -> str:
    return (
        f'<div class="failure-item"><h3>{_e(title)}: <span class="mono">{_e(failure.cls)}</span></h3>'
        f'<p class="failure-message">{_e(failure.message)}</p>'
        f'<pre class="traceback">{_e(failure.traceback)}</pre></div>'
    )


# The job graph as SVG --------------------------------------------------------------------------

BOX_WIDTH = 190
BOX_HEIGHT = 66
COLUMN_GAP = 70
ROW_GAP = 22
MARGIN = 16
_LABEL_CHARS = 22


@dataclass(frozen=True)
class PlacedVertex:
    """A vertex's box: its layer (topological depth, a column) and top-left corner."""

    vertex_id: str
    layer: int
    x: int
    y: int


def layout_graph(vertices: Sequence[VertexDetails]) -> tuple[list[PlacedVertex], list[tuple[str, str]], int, int]:
    """Place vertices in columns by longest path from a source; return boxes, edges, width, height.

    Within a column, vertices are ordered by the mean row of their inputs (one barycentre
    pass), which keeps edges of the usual pipeline shapes from crossing.
    """
    ids = [v.id for v in vertices]
    known = set(ids)
    inputs = {v.id: [i for i in v.inputs if i in known] for v in vertices}
    depth: dict[str, int] = {}

    def depth_of(vertex_id: str, visiting: frozenset[str] = frozenset()) -> int:
        if vertex_id not in depth:
            parents = [p for p in inputs[vertex_id] if p not in visiting]  # a cycle cannot loop us
            depth[vertex_id] = 1 + max((depth_of(p, visiting | {vertex_id}) for p in parents), default=-1)
        return depth[vertex_id]

    for vertex_id in ids:
        depth_of(vertex_id)
    layers: dict[int, list[str]] = {}
    for vertex_id in ids:
        layers.setdefault(depth[vertex_id], []).append(vertex_id)

    row: dict[str, float] = {}
    for layer in sorted(layers):
        members = layers[layer]
        if layer > 0:

            def barycentre(vertex_id: str) -> float:
                rows = [row[p] for p in inputs[vertex_id]]
                return sum(rows) / len(rows) if rows else 0.0

            members.sort(key=barycentre)  # stable: ties keep the graph's order
        for index, vertex_id in enumerate(members):
            row[vertex_id] = index

    tallest = max((len(m) for m in layers.values()), default=0)
    height = 2 * MARGIN + max(tallest * BOX_HEIGHT + (tallest - 1) * ROW_GAP, 0)
    width = 2 * MARGIN + max(len(layers) * BOX_WIDTH + (len(layers) - 1) * COLUMN_GAP, 0)
    placed = []
    for layer, members in sorted(layers.items()):
        column_height = len(members) * BOX_HEIGHT + (len(members) - 1) * ROW_GAP
        top = (height - column_height) // 2  # centre each column vertically
        for index, vertex_id in enumerate(members):
            placed.append(
                PlacedVertex(
                    vertex_id, layer, MARGIN + layer * (BOX_WIDTH + COLUMN_GAP), top + index * (BOX_HEIGHT + ROW_GAP)
                )
            )
    edges = [(parent, child) for child in ids for parent in inputs[child]]
    return placed, edges, width, height


def _label(text: str) -> str:
    return text if len(text) <= _LABEL_CHARS else text[: _LABEL_CHARS - 1] + "…"


def render_graph_svg(vertices: Sequence[VertexDetails], result: JobResult | None = None) -> str:
    """The JobGraph as an SVG: boxes coloured by state, arrows from input to consumer."""
    if not vertices:
        return '<p class="empty">This job has no vertices.</p>'
    placed, edges, width, height = layout_graph(vertices)
    by_id = {v.id: v for v in vertices}
    results = _vertex_results(result)
    where = {p.vertex_id: p for p in placed}
    parts = [
        f'<svg id="job-graph" class="job-graph" xmlns="http://www.w3.org/2000/svg" '
        f'viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" aria-label="job graph">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="8" markerHeight="8" '
        'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" class="arrowhead"/></marker></defs>',
    ]
    for parent, child in edges:
        a, b = where[parent], where[child]
        x1, y1 = a.x + BOX_WIDTH, a.y + BOX_HEIGHT // 2
        x2, y2 = b.x - 2, b.y + BOX_HEIGHT // 2
        bend = (x2 - x1) // 2
        parts.append(
            f'<path class="edge" data-from="{_e(parent)}" data-to="{_e(child)}" '
            f'd="M {x1} {y1} C {x1 + bend} {y1}, {x2 - bend} {y2}, {x2} {y2}" marker-end="url(#arrow)"/>'
        )
    for p in placed:
        vertex = by_id[p.vertex_id]
        state = vertex.state.value
        attempts = attempts_label(vertex, results.get(p.vertex_id))
        cx = p.x + BOX_WIDTH // 2
        parts.append(
            f'<g class="vertex state-{_e(state)}" data-vertex="{_e(p.vertex_id)}" data-layer="{p.layer}">'
            f"<title>{_e(p.vertex_id)}: {_e(state)}</title>"
            f'<rect x="{p.x}" y="{p.y}" width="{BOX_WIDTH}" height="{BOX_HEIGHT}" rx="6"/>'
            f'<text class="v-name" x="{cx}" y="{p.y + 20}">{_e(_label(p.vertex_id))}</text>'
            f'<text class="v-state" x="{cx}" y="{p.y + 38}">{_e(state)}</text>'
            f'<text class="v-meta" x="{cx}" y="{p.y + 56}">parallelism {_e(vertex.parallelism)}'
            f' · <tspan class="v-attempts">{_e(attempts)}</tspan></text>'
            "</g>"
        )
    parts.append("</svg>")
    return "".join(parts)
