// A job's page: polls GET /jobs/{id} about once a second and updates status, times, the
// graph's vertex colours, the vertex and subtask tables; once the job is terminal it fetches
// GET /jobs/{id}/execution-result for failures, rows and result paths, then stops polling.
"use strict";

(function () {
  const { h, text, badge } = window.SD;
  const body = document.body;
  const jobId = body.dataset.jobId;
  const jobPath = `jobs/${encodeURIComponent(jobId)}`;

  // The REST API counts attempts from 0 (as Flink's does); people count from 1 (as its UI).
  function attemptNumber(subtask) {
    return Number.isInteger(subtask.attempt) ? subtask.attempt + 1 : null;
  }

  function attemptsLabel(vertex, vertexResult) {
    if (vertexResult && vertexResult.attempts !== undefined && vertexResult.attempts !== null) {
      return `attempts ${vertexResult.attempts}`;
    }
    const numbers = (vertex.subtasks || []).map(attemptNumber).filter((n) => n !== null);
    return numbers.length ? `attempt ${Math.max(...numbers)}` : "attempt —";
  }

  function renderHeader(job) {
    SD.setContent("job-name", text(job.name, job.id));
    SD.setContent("job-status", badge(job.status));
    SD.setContent("job-start", SD.formatTime(job.start_time));
    SD.setContent("job-end", SD.formatTime(job.end_time));
    SD.setContent("job-duration", SD.formatDuration(SD.jobDuration(job)));
    body.dataset.status = job.status;
    const cancel = document.getElementById("cancel-job");
    if (cancel && SD.isTerminal(job.status)) cancel.remove();
  }

  // Cancel: asks first, then PATCH /jobs/{id}; the polling shows the job's states from there.
  const cancelButton = document.getElementById("cancel-job");
  if (cancelButton) {
    cancelButton.addEventListener("click", async () => {
      if (!window.confirm(`Cancel job ${body.dataset.jobId}? Its running tasks are stopped.`)) return;
      cancelButton.disabled = true;
      cancelButton.textContent = "Cancelling…";
      try {
        await SD.send("PATCH", jobPath);
      } catch (error) {
        cancelButton.disabled = false;
        cancelButton.textContent = "Cancel job";
        window.alert(`The job was not cancelled: ${error.message}`);
      }
    });
  }

  // The graph's layout comes from the server; only states and attempts change while a job runs.
  function renderGraph(vertices, results) {
    const svg = document.getElementById("job-graph");
    if (!svg) return;
    for (const vertex of vertices) {
      const box = svg.querySelector(`g.vertex[data-vertex="${CSS.escape(String(vertex.id))}"]`);
      if (!box) continue;
      const state = text(vertex.state, "UNKNOWN");
      box.setAttribute("class", `vertex state-${state}`);
      box.querySelector(".v-state").textContent = state;
      box.querySelector(".v-attempts").textContent = attemptsLabel(vertex, results[vertex.id]);
      box.querySelector("title").textContent = `${vertex.id}: ${state}`;
    }
  }

  function renderVertexTable(vertices, results) {
    const rows = vertices.map((vertex) => {
      const result = results[vertex.id] || {};
      return h("tr", { "data-vertex": vertex.id },
        h("td", { class: "mono" }, vertex.id),
        h("td", {}, badge(vertex.state)),
        h("td", {}, text(vertex.parallelism)),
        h("td", {}, attemptsLabel(vertex, result)),
        h("td", {}, text(result.rows)),
        h("td", { class: "mono path" }, text(result.result_path)));
    });
    SD.setRows("vertices-body", rows, 6, "This job has no vertices.");
  }

  function renderSubtaskTable(vertices) {
    const rows = [];
    for (const vertex of vertices) {
      for (const subtask of vertex.subtasks || []) {
        rows.push(h("tr", {},
          h("td", { class: "mono" }, vertex.id),
          h("td", {}, text(subtask.index)),
          h("td", {}, badge(subtask.state)),
          h("td", {}, text(attemptNumber(subtask))),
          h("td", { class: "mono" }, text(subtask.taskmanager)),
          h("td", {}, logLink(vertex, subtask))));
      }
    }
    SD.setRows("subtasks-body", rows, 6, "No subtasks yet.");
  }

  function logLink(vertex, subtask) {
    if (!Number.isInteger(subtask.attempt)) return "—";
    const query = new URLSearchParams({ vertex: vertex.id, subtask: subtask.index, attempt: subtask.attempt });
    return h("a", { href: `${encodeURIComponent(jobId)}/log?${query}` }, "log");
  }

  function renderRepairs(repairs) {
    if (!repairs || !repairs.length) return;
    const rows = repairs.slice().reverse().map((repair) => h("tr", {},
      h("td", {}, text(repair.number)),
      h("td", { class: "mono" }, repair.requested.join(", ")),
      h("td", { class: "mono" }, repair.vertices.join(", ")),
      h("td", {}, SD.formatTime(repair.requested_at)),
      h("td", {}, badge(repair.status || "RUNNING"))));
    const table = h("table", { class: "grid" },
      h("thead", {}, h("tr", {}, ...["Repair", "Asked for", "Ran again", "Requested (UTC)", "Outcome"]
        .map((title) => h("th", {}, title)))),
      h("tbody", { id: "repairs-body" }, ...rows));
    SD.setContent("job-repairs", h("section", { class: "panel" }, h("h2", {}, "Repairs"), table));
  }

  function failureItem(title, failure) {
    return h("div", { class: "failure-item" },
      h("h3", {}, `${title}: `, h("span", { class: "mono" }, text(failure.class, ""))),
      h("p", { class: "failure-message" }, text(failure.message, "")),
      h("pre", { class: "traceback" }, text(failure.traceback, "")));
  }

  function renderFailures(result) {
    const items = [];
    if (result && result.failure) items.push(failureItem("Root cause", result.failure));
    for (const [vertexId, vertexResult] of Object.entries((result && result.vertices) || {})) {
      if (vertexResult.failure) items.push(failureItem(`Vertex ${vertexId}`, vertexResult.failure));
    }
    if (items.length === 0) {
      SD.setContent("job-failures");
      return;
    }
    SD.setContent("job-failures", h("section", { class: "panel failure" }, h("h2", {}, "Failure"), items));
  }

  async function tick() {
    const [job, overview] = await Promise.all([
      SD.getJSON(jobPath),
      SD.getJSON("overview").catch(() => null),
    ]);
    SD.updateBanner(overview);
    let result = null;
    if (SD.isTerminal(job.status)) {
      const answer = await SD.getJSON(`${jobPath}/execution-result`);
      result = answer.job_execution_result || null;
    }
    const vertices = job.vertices || [];
    const results = (result && result.vertices) || {};
    renderHeader(job);
    renderGraph(vertices, results);
    renderVertexTable(vertices, results);
    renderSubtaskTable(vertices);
    renderRepairs(job.repairs);
    if (result) renderFailures(result);
    return !SD.isTerminal(job.status);
  }

  // A page rendered after the job ended already shows everything; only live jobs are polled.
  if (!SD.isTerminal(body.dataset.status)) SD.poll(tick);
})();
