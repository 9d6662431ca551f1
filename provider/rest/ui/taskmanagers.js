// The TaskManagers page: polls GET /taskmanagers about once a second and redraws each
// TaskExecutor's card with its slots and the job running in each.
"use strict";

(function () {
  const { h, text, jobLink } = window.SD;

  function slot(entry) {
    const busy = Boolean(entry.job_id);
    return h("div", {
      class: busy ? "slot busy" : "slot free",
      title: entry.allocation_id ? `allocation ${entry.allocation_id}` : null,
    },
    h("span", { class: "slot-index" }, `slot ${text(entry.index)}`),
    busy ? h("span", { class: "slot-job" }, jobLink(entry.job_id)) : h("span", { class: "slot-free" }, "free"));
  }

  function card(tm) {
    return h("section", { class: "panel tm", "data-tm-id": tm.id },
      h("h2", { class: "mono" }, tm.id),
      h("dl", { class: "facts" },
        h("dt", {}, "Host"), h("dd", {}, text(tm.hostname, "")),
        h("dt", {}, "Slots free / total"), h("dd", {}, `${text(tm.slots_free)} / ${text(tm.slots_total)}`),
        h("dt", {}, "Last heartbeat (UTC)"), h("dd", {}, SD.formatTime(tm.last_heartbeat))),
      h("div", { class: "slots" }, (tm.slots || []).map(slot)));
  }

  async function tick() {
    const [answer, overview] = await Promise.all([
      SD.getJSON("taskmanagers"),
      SD.getJSON("overview").catch(() => null),
    ]);
    SD.updateBanner(overview);
    const taskmanagers = answer.taskmanagers || [];
    if (taskmanagers.length === 0) {
      SD.setContent("tm-list", h("p", { class: "empty" }, "No TaskExecutor is registered."));
    } else {
      SD.setContent("tm-list", taskmanagers.map(card));
    }
    return true;
  }

  SD.poll(tick);
})();
