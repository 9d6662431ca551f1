// The overview page: polls GET /overview, /jobs and /taskmanagers about once a second.
"use strict";

(function () {
  const { h, text, badge, jobLink } = window.SD;
  const RECENT_JOBS_SHOWN = 50;

  function renderCards(overview) {
    const total = overview.slots_total || 0;
    const free = overview.slots_available || 0;
    SD.setContent("ov-leader", overview.is_leader ? "this master" : text(overview.leader, "none"));
    SD.setContent("ov-taskmanagers", text(overview.taskmanagers, "0"));
    SD.setContent("ov-slots", `${total - free} / ${total}`);
    SD.setContent("ov-slots-free", String(free));
    SD.setContent("ov-jobs-running", text(overview.jobs_running, "0"));
    SD.setContent("ov-jobs-finished", text(overview.jobs_finished, "0"));
    SD.setContent("ov-jobs-failed", text(overview.jobs_failed, "0"));
    SD.setContent("ov-jobs-cancelled", text(overview.jobs_cancelled, "0"));
  }

  function renderJobs(jobs) {
    const recent = [...jobs]
      .sort((a, b) => (b.start_time || 0) - (a.start_time || 0))
      .slice(0, RECENT_JOBS_SHOWN);
    const rows = recent.map((job) => h("tr", { "data-job-id": job.id },
      h("td", {}, jobLink(job.id, job.name || job.id)),
      h("td", {}, jobLink(job.id)),
      h("td", {}, badge(job.status)),
      h("td", {}, SD.formatTime(job.start_time)),
      h("td", {}, SD.formatTime(job.end_time)),
      h("td", {}, SD.formatDuration(SD.jobDuration(job)))));
    SD.setRows("jobs-body", rows, 6, "No jobs yet.");
  }

  function renderTaskManagers(taskmanagers) {
    const rows = taskmanagers.map((tm) => h("tr", { "data-tm-id": tm.id },
      h("td", { class: "mono" }, tm.id),
      h("td", {}, text(tm.hostname, "")),
      h("td", {}, `${text(tm.slots_free)} / ${text(tm.slots_total)}`),
      h("td", {}, SD.formatTime(tm.last_heartbeat))));
    SD.setRows("tm-body", rows, 4, "No TaskExecutor is registered.");
  }

  async function tick() {
    // Every master answers /overview; a standby may refuse the lists, which then stay as shown.
    const [overview, jobs, taskmanagers] = await Promise.all([
      SD.getJSON("overview"),
      SD.getJSON(`jobs?limit=${RECENT_JOBS_SHOWN}`).catch(() => null),
      SD.getJSON("taskmanagers").catch(() => null),
    ]);
    SD.updateBanner(overview);
    renderCards(overview);
    if (jobs) renderJobs(jobs.jobs || []);
    if (taskmanagers) renderTaskManagers(taskmanagers.taskmanagers || []);
    for (const note of document.querySelectorAll(".unavailable")) note.hidden = Boolean(jobs && taskmanagers);
    return true;
  }

  SD.poll(tick);
})();
