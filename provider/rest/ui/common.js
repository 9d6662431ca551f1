// Shared by every page of the sparkdispatch web UI: REST calls, DOM building, formatting,
// polling, and the standby banner. Plain browser JavaScript, no build step, no dependencies.
"use strict";

window.SD = (function () {
  const body = document.body;
  // Both are relative to the page, so the UI keeps working behind a path prefix.
  const apiBase = new URL(body.dataset.api || "../", window.location.href);
  const uiRoot = body.dataset.root || "./";
  // The job statuses polling stops at, as the server's JobStatus names them.
  const TERMINAL = new Set((body.dataset.terminalStatuses || "").split(" ").filter(Boolean));
  const POLL_INTERVAL_MS = 1000;

  function isTerminal(status) {
    return TERMINAL.has(status);
  }

  async function getJSON(path) {
    const response = await fetch(new URL(path, apiBase), {
      headers: { Accept: "application/json" },
      cache: "no-store",
    });
    if (!response.ok) {
      const error = new Error(`GET ${path}: HTTP ${response.status}`);
      error.status = response.status;
      throw error;
    }
    return response.json();
  }

  // A state-changing REST call, with the session's CSRF token when the page has one (a master
  // with a token); resolves to the response, rejects with the error body's first message.
  async function send(method, path) {
    const meta = document.querySelector('meta[name="csrf-token"]');
    const headers = { Accept: "application/json" };
    if (meta) headers["X-CSRF-Token"] = meta.content;
    const response = await fetch(new URL(path, apiBase), { method, headers, cache: "no-store" });
    if (!response.ok) {
      const answer = await response.json().catch(() => ({}));
      throw new Error((answer.errors && answer.errors[0]) || `${method} ${path}: HTTP ${response.status}`);
    }
    return response;
  }

  // h("a", {href: x}, "text", child...): builds nodes; text is never parsed as HTML.
  function h(tag, attrs, ...children) {
    const element = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined) continue;
      if (name === "class") element.className = value;
      else element.setAttribute(name, value);
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined) continue;
      element.append(child instanceof Node ? child : String(child));
    }
    return element;
  }

  function text(value, fallback = "—") {
    return value === null || value === undefined || value === "" ? fallback : String(value);
  }

  function badge(state) {
    const name = text(state, "UNKNOWN");
    return h("span", { class: `badge state-${name}` }, name);
  }

  function jobLink(jobId, label) {
    return h("a", { class: "mono", href: `${uiRoot}jobs/${encodeURIComponent(jobId)}` }, text(label, jobId));
  }

  function formatTime(epochMs) {
    if (typeof epochMs !== "number" || epochMs < 0) return "—";
    return new Date(epochMs).toISOString().replace("T", " ").slice(0, 19);
  }

  function formatDuration(ms) {
    if (typeof ms !== "number" || ms < 0) return "—";
    if (ms < 1000) return `${Math.floor(ms)} ms`;
    const seconds = ms / 1000;
    if (seconds < 60) return `${seconds.toFixed(1)} s`;
    let minutes = Math.floor(seconds / 60);
    const secs = Math.floor(seconds) % 60;
    if (minutes < 60) return `${minutes} min ${String(secs).padStart(2, "0")} s`;
    const hours = Math.floor(minutes / 60);
    minutes %= 60;
    return `${hours} h ${String(minutes).padStart(2, "0")} min`;
  }

  function jobDuration(job) {
    if (typeof job.duration_ms === "number") return job.duration_ms;
    const start = job.start_time;
    const end = job.end_time;
    if (typeof start !== "number" || start < 0) return null;
    if (typeof end === "number" && end >= 0) return end - start;
    return Date.now() - start;
  }

  function setContent(id, ...children) {
    const element = document.getElementById(id);
    if (element) element.replaceChildren(...children.flat());
  }

  // Replaces a table body's rows; `columns` is the table's column count for the empty row.
  function setRows(tbodyId, rows, columns, emptyText) {
    if (rows.length === 0) {
      rows = [h("tr", { class: "empty" }, h("td", { colspan: columns }, emptyText))];
    }
    setContent(tbodyId, rows);
  }

  function updateBanner(overview) {
    const banner = document.getElementById("leader-banner");
    if (!banner || !overview) return;
    if (overview.is_leader) {
      banner.hidden = true;
      banner.replaceChildren();
      return;
    }
    const leader = overview.leader;
    if (!leader) {
      banner.replaceChildren("This master is a standby and no master leads at the moment.");
    } else if (/^https?:\/\//.test(leader)) {
      const href = `${leader.replace(/\/+$/, "")}/ui/`;
      banner.replaceChildren("This master is a standby. The leading master is ", h("a", { href }, leader), ".");
    } else {
      banner.replaceChildren(`This master is a standby. The leading master is ${leader}.`);
    }
    banner.hidden = false;
  }

  // Calls `tick` about every POLL_INTERVAL_MS until it resolves to false. A failed call shows
  // the connection notice and is retried; the page keeps what it last showed.
  function poll(tick) {
    const notice = document.getElementById("connection");
    async function run() {
      let again = true;
      try {
        again = await tick();
        if (notice) notice.hidden = true;
      } catch (error) {
        if (notice) notice.hidden = false;
        console.warn("sparkdispatch UI: poll failed:", error.message || error);
      }
      if (again !== false) window.setTimeout(run, POLL_INTERVAL_MS);
      else body.dataset.polling = "stopped";
    }
    body.dataset.polling = "on";
    window.setTimeout(run, POLL_INTERVAL_MS);
  }

  return {
    isTerminal, getJSON, send, h, text, badge, jobLink, formatTime, formatDuration, jobDuration,
    setContent, setRows, updateBanner, poll,
  };
})();
