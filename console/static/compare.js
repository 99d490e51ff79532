/* fabricflow console: the Compare view (before vs after a change) and the change / step marks the time charts
 * draw. Loaded before console.js, which calls window.fabricflowViews.compare(h) with its helpers (api, el, clear,
 * state, setState, fmt*). Every name and text from the data goes into the page as text. */
(function () {
  "use strict";

  const VERDICT_CLASS = { improved: "v-good", worse: "v-bad", "no significant change": "v-same",
    "no verdict": "v-none", "insufficient data": "v-none" };

  function fmtValue(v, unit, signed, h) {
    if (v === null || v === undefined) return "-";
    const sign = signed && v > 0 ? "+" : "";
    if (unit === "share") return sign + (100 * v).toFixed(2) + " %";
    if (unit === "bit/s") return sign + h.fmtRate(v);
    if (unit === "B/s") return sign + h.fmtBytes(v) + "/s";
    if (unit === "ms") return sign + v.toFixed(0) + " ms";
    if (unit === "1/s" || unit === "1/min") return sign + v.toFixed(2) + " " + unit.slice(1);
    return sign + v.toFixed(2);
  }
  function interval(r, h) {
    if (!r.interval) return "-";
    return "[" + fmtValue(r.interval[0], r.unit, true, h) + ", " + fmtValue(r.interval[1], r.unit, true, h) + "]";
  }
  function rangeOf(s) {  // "lo..hi" (unix ms) -> [lo, hi] or null
    const m = /^(\d+)\.\.(\d+)$/.exec(s || "");
    return m ? [+m[1], +m[2]] : null;
  }

  function metricTable(rows, withEntity, h) {
    const el = h.el;
    const head = el("tr", {}, ...(withEntity ? [el("th", {}, "node")] : []), el("th", {}, "metric"),
      el("th", { class: "num" }, "before"), el("th", { class: "num" }, "after"), el("th", { class: "num" }, "change"),
      el("th", { class: "num" }, "interval"), el("th", {}, "verdict"));
    const body = el("tbody", {});
    for (const r of rows) {
      body.appendChild(el("tr", { "data-metric": r.metric, "data-entity": r.entity },
        ...(withEntity ? [el("td", {}, r.entity)] : []),
        el("td", { title: r.better ? r.better + " is better; a change needs at least " + fmtValue(r.min_effect, r.unit, false, h) : "no good direction: no verdict" }, r.label),
        el("td", { class: "num" }, fmtValue(r.before, r.unit, false, h)), el("td", { class: "num" }, fmtValue(r.after, r.unit, false, h)),
        el("td", { class: "num" }, fmtValue(r.change, r.unit, true, h)), el("td", { class: "num" }, interval(r, h)),
        el("td", {}, el("span", { class: "verdict " + (VERDICT_CLASS[r.verdict] || "") }, r.verdict))));
    }
    return el("table", { class: "cmp" }, el("thead", {}, head), body);
  }

  function syncForm(h) {
    const s = h.state;
    const $ = (id) => document.getElementById(id);
    $("c-scope").value = s.cscope || "job";
    $("c-entity").value = s.centity || "";
    const b = rangeOf(s.cb), a = rangeOf(s.ca);
    $("c-around").checked = !(b && a);
    $("c-bfrom").value = b ? h.toLocalInput(b[0]) : ""; $("c-bto").value = b ? h.toLocalInput(b[1]) : "";
    $("c-afrom").value = a ? h.toLocalInput(a[0]) : ""; $("c-ato").value = a ? h.toLocalInput(a[1]) : "";
    for (const x of ["c-bfrom", "c-bto", "c-afrom", "c-ato"]) $(x).disabled = $("c-around").checked;
  }

  let wired = false;
  function wire(h) {
    if (wired) return;
    wired = true;
    const $ = (id) => document.getElementById(id);
    $("c-around").addEventListener("change", () => {
      for (const x of ["c-bfrom", "c-bto", "c-afrom", "c-ato"]) $(x).disabled = $("c-around").checked;
    });
    $("c-run").addEventListener("click", () => {
      const patch = { cscope: $("c-scope").value, centity: $("c-entity").value.trim(), cb: "", ca: "" };
      if (!$("c-around").checked) {
        const v = ["c-bfrom", "c-bto", "c-afrom", "c-ato"].map((x) => h.fromLocalInput($(x).value));
        if (v.every(isFinite)) { patch.cb = v[0] + ".." + v[1]; patch.ca = v[2] + ".." + v[3]; }
      }
      h.setState(patch);
    });
    $("c-mark").addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const body = { text: $("c-mark-text").value };
      const scope = $("c-scope").value, ent = $("c-entity").value.trim();
      if (ent && scope === "job") body.job = ent;
      if (ent && scope === "node") body.node = ent;
      const at = h.fromLocalInput($("c-mark-at").value);
      if (isFinite(at)) body.at = at;
      const headers = { "Content-Type": "application/json" };
      if (h.token) headers.Authorization = "Bearer " + h.token;
      const r = await fetch("api/marks/change", { method: "POST", headers, body: JSON.stringify(body) });
      const d = await r.json().catch(() => ({ error: "bad response" }));
      $("c-mark-info").textContent = r.ok ? "recorded " + d.mark.mark_id + " at " + h.fmtTime(d.mark.time_ms) + " (" + d.stored + ")" : "not recorded: " + d.error;
      if (r.ok) { $("c-mark-text").value = ""; h.setState({}); }
    });
  }

  async function renderCompare(h) {
    wire(h);
    syncForm(h);
    const el = h.el, $ = (id) => document.getElementById(id);
    const jobs = (await h.api("jobs")).jobs;
    const dl = h.clear($("c-entities"));
    for (const j of jobs) dl.appendChild(el("option", { value: j.name }));
    const s = h.state;
    const entity = s.centity || (jobs[0] ? jobs[0].name : "");
    if (!s.centity) $("c-entity").value = entity;
    const out = h.clear($("c-result"));
    if (!entity) { $("c-info").textContent = "no job in the inventory or the data: type an entity"; return; }
    const params = { scope: s.cscope || "job", entity };
    const b = rangeOf(s.cb), a = rangeOf(s.ca);
    if (b && a) Object.assign(params, { bfrom: b[0], bto: b[1], afrom: a[0], ato: a[1] });
    $("c-info").textContent = "comparing…";
    let rep;
    try { rep = await h.api("compare", params); }
    catch (e) { $("c-info").textContent = "could not compare: " + e.message; return; }
    const counts = {};
    for (const r of rep.metrics) counts[r.verdict] = (counts[r.verdict] || 0) + 1;
    $("c-info").textContent = rep.metrics.length + " comparisons · " + (counts.improved || 0) + " improved · " +
      (counts.worse || 0) + " worse · intervals " + Math.round(100 * (1 - rep.alpha)) + " % for the whole report (Bonferroni over " + rep.family + ")";
    const m = rep.marker;
    out.appendChild(el("div", { class: "caption cmp-head" },
      m ? "change at " + h.fmtTime(m.time_ms) + ": " + m.text + (m.author ? " (" + m.author + ")" : "") : "given periods",
      el("br", {}), "before " + h.fmtTime(rep.before.from_ms) + " – " + h.fmtTime(rep.before.to_ms) + " (" + rep.before.windows + " windows of " + rep.window_ms / 1000 + " s) · after " +
      h.fmtTime(rep.after.from_ms) + " – " + h.fmtTime(rep.after.to_ms) + " (" + rep.after.windows + " windows" + (m ? "; " + rep.settle_ms / 1000 + " s after the change left out" : "") + ")"));
    const main = rep.metrics.filter((r) => r.entity_kind !== "node" || rep.scope === "node");
    const nodes = rep.metrics.filter((r) => r.entity_kind === "node" && rep.scope !== "node");
    out.appendChild(el("h3", {}, rep.scope + " " + rep.entity));
    out.appendChild(metricTable(main, false, h));
    if (nodes.length) {
      const sig = nodes.filter((r) => r.verdict === "improved" || r.verdict === "worse");
      out.appendChild(el("h3", {}, "nodes: " + sig.length + " significant changes, " + (nodes.length - sig.length) + " node metrics without one"));
      if (sig.length) out.appendChild(metricTable(sig, true, h));
    }
    if (rep.steps) {
      const p = el("div", { class: "panel" }, el("h4", {}, "steps (from the job's step marks)"));
      for (const k of ["before", "after"]) {
        const x = rep.steps[k]; if (!x) continue;
        p.appendChild(el("div", {}, k + ": " + x.steps + " steps, median " + x.median_step_ms.toFixed(0) + " ms, communication " +
          x.median_comm_ms.toFixed(0) + " ms (" + h.fmtBytes(x.comm_bytes_per_step) + " per step), I/O " + x.io_ms_per_step.toFixed(0) +
          " ms per step · stretched communication: " + x.stretched.length + " steps"));
      }
      out.appendChild(p);
    }
    const ev = rep.events || {};
    const evLine = (k) => (ev[k] || []).length ? (ev[k] || []).map((e) => e.type + " " + e.entity + (e.diagnosis ? " (" + (e.diagnosis.class || e.diagnosis) + ")" : "")).join(", ") : "none";
    out.appendChild(el("div", { class: "caption" }, "events before: " + evLine("before") + " · after: " + evLine("after")));
  }

  // change markers as vertical lines on a time chart (ECharts markLine data), newest last
  function changeLines(changes) {
    return changes.map((c) => ({ xAxis: c.time_ms, name: c.text,
      label: { show: true, formatter: () => "⚑ " + (c.text.length > 40 ? c.text.slice(0, 39) + "…" : c.text), color: "#f0b429", fontSize: 10, position: "end", rotate: 0, backgroundColor: "rgba(15,20,25,0.85)", padding: [1, 3] },
      lineStyle: { color: "#f0b429", type: "solid", width: 1.5 } }));
  }

  window.fabricflowViews = Object.assign(window.fabricflowViews || {}, { compare: renderCompare });
  window.fabricflowMarks = { changeLines };
})();
