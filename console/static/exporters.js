/* fabricflow console: the Exporters view, telemetry health per exporter (GET /api/exporters). Loaded before
 * console.js, which calls window.fabricflowViews.exporters(h) with its helpers. Every text from the data goes
 * into the page as text. */
(function () {
  "use strict";

  function pct(x) { return x === null || x === undefined ? "-" : (100 * x).toFixed(2) + " %"; }
  function num(x) { return x === null || x === undefined ? "-" : String(x); }
  function skew(ms) { return ms === null || ms === undefined ? "-" : (ms / 1000).toFixed(1) + " s"; }

  async function renderExporters(h) {
    const params = {};
    if (h.state.from && h.state.to) { params.from = h.state.from; params.to = h.state.to; } else { params.last = "1h"; }
    const d = await h.api("exporters", params);
    const body = h.clear(document.querySelector("#x-table tbody"));
    for (const x of d.exporters) {
      const bad = new Set(x.problems);
      const cell = (text, problem) => h.el("td", { class: problem && bad.has(problem) ? "x-bad" : "" }, text);
      body.appendChild(h.el("tr", { class: x.state === "ok" ? "" : "x-row-bad" },
        h.el("td", {}, x.exporter), h.el("td", {}, x.protocol),
        h.el("td", { class: x.state === "ok" ? "x-ok" : "x-bad", title: x.problems.join(", ") }, x.state),
        cell(h.fmtTime(x.last_seen_ms), "silent"), h.el("td", {}, num(x.datagrams)),
        cell(pct(x.loss_ratio), "export loss"), cell(pct(x.sampler_loss_ratio), "sampler drops"),
        cell(skew(x.clock_skew_ms), "clock skew"), cell(pct(x.records_without_rate_ratio), "no sampling rate"),
        h.el("td", {}, num(x.restarts)), h.el("td", {}, num(x.drop_notifications))));
    }
    const n = d.exporters.filter((x) => x.state !== "ok").length;
    document.getElementById("x-info").textContent = " — " + d.exporters.length + " exporters, " + n + " with a problem";
  }

  window.fabricflowViews = Object.assign(window.fabricflowViews || {}, { exporters: renderExporters });
})();
