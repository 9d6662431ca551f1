// An attempt's log page: appends what the attempt writes (GET /jobs/{id}/vertices/{v}/log from
// the offset the page was rendered up to) about once a second, until its job has ended and the
// log has no more to give.
"use strict";

(function () {
  const { badge } = window.SD;
  const body = document.body;
  const logPath = `jobs/${encodeURIComponent(body.dataset.jobId)}/vertices/` +
    `${encodeURIComponent(body.dataset.vertex)}/log`;
  let offset = Number(body.dataset.nextOffset || 0);

  async function tick() {
    const query = new URLSearchParams({ subtask: body.dataset.subtask, offset: String(offset) });
    if (body.dataset.attempt) query.set("attempt", body.dataset.attempt);
    let piece;
    try {
      piece = await SD.getJSON(`${logPath}?${query}`);
    } catch (error) {
      if (error.status === 404) return true; // no output yet
      throw error;
    }
    if (piece.text) {
      const pre = document.getElementById("log-text");
      pre.append(piece.text);
      const empty = document.getElementById("log-empty");
      if (empty) empty.remove();
    }
    offset = piece.next_offset;
    SD.setContent("log-state", badge(piece.vertex_state));
    body.dataset.status = piece.job_status;
    // a terminal job's log is complete once a read returns nothing more
    return !(SD.isTerminal(piece.job_status) && !piece.text);
  }

  if (!SD.isTerminal(body.dataset.status)) SD.poll(tick);
})();
