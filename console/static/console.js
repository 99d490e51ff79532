/* fabricflow console: one page, six views (the Compare view in compare.js, Topology in topology.js, Top-N in topn.js, an event's
 * evidence and diagnosis in evidence.js); the URL hash keeps the whole view state.
 * Every name from inventories, policies and flows goes into the page as text (textContent, canvas
 * fillText, ECharts' canvas renderer); nothing from the data is ever parsed as HTML. */
(function () {
  "use strict";

  const TOKEN = new URLSearchParams(location.search).get("token");
  const CATEGORIES = ["collective", "rocev2", "storage", "dns", "mgmt", "external", "other"];
  const EVENT_TYPES = ["incast", "straggler", "link", "alert", "pattern"];
  const TYPE_COLOR = { incast: "#ff5a5f", straggler: "#f0b429", link: "#b57bff", alert: "#4fa3e0", pattern: "#3ecf8e" };
  const PHASE_COLOR = { communication: "rgba(79,163,224,0.16)", dataset_read: "rgba(62,207,142,0.09)",
    checkpoint_write: "rgba(240,180,41,0.30)" };
  const DEFAULTS = { view: "matrix", mode: "live", window: "", from: "", to: "", level: "node", cat: "",
    nlevel: "group", n: "10", ncat: "", job: "", event: "", port: "", link: "", tsub: "graph", expand: "", types: "", q: "",
    cscope: "job", centity: "", cb: "", ca: "" };

  let state = Object.assign({}, DEFAULTS);
  let status = null;
  let liveWindows = [];
  let playing = null;
  let refreshTimer = null;
  let serverWasDown = false;
  const charts = {};

  // ------------------------------------------------------------------ helpers

  const $ = (id) => document.getElementById(id);
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v;
      else if (k === "style") e.style.cssText = v;
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v);
    }
    for (const c of children) {
      if (c === null || c === undefined) continue;
      e.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }
  function decodeF64(b64) {  // the matrix values: base64 of little-endian float64
    const bin = atob(b64); const u8 = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) u8[i] = bin.charCodeAt(i);
    return new Float64Array(u8.buffer);
  }
  function clear(e) { while (e.firstChild) e.removeChild(e.firstChild); return e; }
  function fmtBytes(b) {
    if (b === null || b === undefined) return "-";
    const u = ["B", "kB", "MB", "GB", "TB", "PB"]; let i = 0; let x = Number(b);
    while (Math.abs(x) >= 1000 && i < u.length - 1) { x /= 1000; i++; }
    return (i ? x.toFixed(x < 10 ? 2 : 1) : x.toFixed(0)) + " " + u[i];
  }
  function fmtRate(bps) {
    if (bps === null || bps === undefined) return "-";
    const u = ["bit/s", "kbit/s", "Mbit/s", "Gbit/s", "Tbit/s"]; let i = 0; let x = Number(bps);
    while (Math.abs(x) >= 1000 && i < u.length - 1) { x /= 1000; i++; }
    return x.toFixed(x < 10 ? 2 : 1) + " " + u[i];
  }
  function fmtPct(x) { return x === null || x === undefined ? "-" : (100 * x).toFixed(1) + " %"; }
  function fmtTime(ms) { return ms ? new Date(ms).toISOString().replace("T", " ").replace(".000Z", "").replace("Z", "") : "-"; }
  function toLocalInput(ms) { return ms ? new Date(ms).toISOString().slice(0, 19) : ""; }
  function fromLocalInput(v) { return v ? Date.parse(v + "Z") : NaN; }

  async function api(path, params) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(params || {})) if (v !== "" && v !== null && v !== undefined) q.set(k, v);
    const headers = TOKEN ? { Authorization: "Bearer " + TOKEN } : {};
    const url = "api/" + path + (q.toString() ? "?" + q : "");
    let r;
    try { r = await fetch(url, { headers, cache: "no-store" }); }
    catch (e) { serverDown(); throw new Error("console server unreachable"); }
    const body = await r.json().catch(() => ({ error: "bad response" }));
    if (!r.ok) throw new Error(body.error || ("HTTP " + r.status));
    return body;
  }

  function timeParams() {
    if (state.mode === "range" && state.from && state.to) return { from: state.from, to: state.to };
    return {};
  }
  function windowParams() {
    const t = timeParams();
    if (t.from) return t;
    return state.window ? { window: state.window } : {};
  }

  function chart(id) {
    if (!charts[id]) charts[id] = echarts.init($(id), "dark", { renderer: "canvas" });
    return charts[id];
  }
  // ECharts tooltips: built as DOM elements from text, never HTML strings
  function tipBox(title, rows) {
    const box = el("div", {}, el("b", {}, title));
    const t = el("table", {});
    for (const [k, v] of rows) t.appendChild(el("tr", {}, el("td", {}, k), el("td", {}, v)));
    box.appendChild(t);
    return box;
  }

  // ------------------------------------------------------------------ URL state

  function readHash() {
    const h = new URLSearchParams(location.hash.slice(1));
    const s = Object.assign({}, DEFAULTS);
    for (const k of Object.keys(DEFAULTS)) if (h.has(k)) s[k] = h.get(k);
    return s;
  }
  function writeHash() {
    const h = new URLSearchParams();
    for (const [k, v] of Object.entries(state)) if (v !== DEFAULTS[k] && v !== "") h.set(k, v);
    const next = "#" + h.toString();
    if (location.hash !== next) history.replaceState(null, "", location.pathname + location.search + next);
  }
  function setState(patch, rerender) {
    Object.assign(state, patch);
    writeHash();
    syncControls();
    if (rerender !== false) render();
  }

  // ------------------------------------------------------------------ status, banner, live stream

  function showBanner(msgs) {
    const b = $("banner");
    if (!msgs.length) { b.hidden = true; clear(b); return; }
    clear(b).appendChild(document.createTextNode(msgs.join("  ·  ")));
    b.hidden = false;
  }
  function serverDown() { serverWasDown = true; showBanner(["console server unreachable: retrying…"]); }

  async function refreshStatus() {
    try {
      const was = status;
      status = await api("status");
      const msgs = [];
      if (status.broker.ok === false) msgs.push("Kafka broker unreachable (" + (status.broker.error || "no connection") + "): live view paused");
      if (status.archive.ok === false) msgs.push("archive unavailable (" + (status.archive.error || "unknown") + "): history paused");
      showBanner(msgs);
      const recovered = serverWasDown || (was && ((was.broker.ok === false && status.broker.ok) || (was.archive.ok === false && status.archive.ok)));
      serverWasDown = false;
      if (recovered) scheduleRefresh(0);
    } catch (e) { /* banner already set */ }
  }

  function startStream() {
    const es = new EventSource("api/stream" + (TOKEN ? "?token=" + encodeURIComponent(TOKEN) : ""));
    es.addEventListener("update", (m) => {
      const d = JSON.parse(m.data);
      refreshStatus();
      // the Compare view reads the archive for its periods: it does not follow the live window
      if (state.mode === "live" && !state.window && state.view !== "compare") scheduleRefresh(400);
      else if (state.view === "matrix") loadWindows();
      void d;
    });
    es.onerror = () => { serverDown(); };
    es.onopen = () => { refreshStatus(); };
  }
  function scheduleRefresh(ms) {
    if (refreshTimer) return;
    refreshTimer = setTimeout(() => { refreshTimer = null; render(true); }, ms);
  }

  // ------------------------------------------------------------------ time control

  async function loadWindows() {
    try {
      const w = await api("windows");
      liveWindows = w.live;
      const r = $("t-window");
      r.max = Math.max(0, liveWindows.length - 1);
      syncControls();
    } catch (e) { /* shown by the banner */ }
  }
  function syncControls() {
    for (const b of document.querySelectorAll("#tabs button")) b.classList.toggle("active", b.dataset.view === state.view);
    for (const v of document.querySelectorAll(".view")) v.classList.toggle("active", v.id === "view-" + state.view);
    $("t-live").classList.toggle("active", state.mode === "live" && !state.window);
    $("t-apply").classList.toggle("active", state.mode === "range");
    $("t-play").classList.toggle("active", !!playing);
    const idx = liveWindows.findIndex((w) => String(w.start_ms) === String(state.window));
    $("t-window").value = idx >= 0 ? idx : liveWindows.length - 1;
    const shown = idx >= 0 ? liveWindows[idx] : liveWindows[liveWindows.length - 1];
    $("t-window-label").textContent = state.mode === "range" ? "" :
      (shown ? "window " + fmtTime(shown.start_ms).slice(11) + (state.window ? "" : " (newest)") : "no live windows yet");
    $("t-from").value = state.mode === "range" ? toLocalInput(+state.from) : "";
    $("t-to").value = state.mode === "range" ? toLocalInput(+state.to) : "";
    $("m-level").value = state.level; $("n-level").value = state.nlevel; $("n-n").value = state.n;
    $("e-q").value = state.q;
    const cats = state.cat ? state.cat.split(",") : [];
    for (const c of document.querySelectorAll("#m-cats input")) c.checked = cats.includes(c.value);
    const ncats = state.ncat ? state.ncat.split(",") : [];
    for (const c of document.querySelectorAll("#n-cats input")) c.checked = ncats.includes(c.value);
    const types = state.types ? state.types.split(",") : EVENT_TYPES;
    for (const c of document.querySelectorAll("#e-types input")) c.checked = types.includes(c.value);
  }
  function chips(container, values, onchange) {
    for (const v of values) {
      const cb = el("input", { type: "checkbox", value: v });
      cb.addEventListener("change", onchange);
      container.appendChild(el("label", {}, cb, " " + v));
    }
  }
  function checked(container) {
    return Array.from(document.querySelectorAll("#" + container + " input:checked")).map((c) => c.value);
  }

  // ------------------------------------------------------------------ matrix (own canvas: 512 x 512 cells stay one image)

  const LUT = (() => {
    const stops = [[0, [13, 8, 135]], [0.25, [84, 2, 163]], [0.5, [185, 50, 137]], [0.75, [249, 142, 8]], [1, [240, 249, 33]]];
    const out = new Uint8ClampedArray(256 * 3);
    for (let i = 0; i < 256; i++) {
      const t = i / 255; let k = 0;
      while (k < stops.length - 2 && t > stops[k + 1][0]) k++;
      const [t0, c0] = stops[k]; const [t1, c1] = stops[k + 1]; const f = (t - t0) / (t1 - t0);
      for (let j = 0; j < 3; j++) out[i * 3 + j] = c0[j] + f * (c1[j] - c0[j]);
    }
    return out;
  })();
  let M = null; // the matrix on screen
  let tipTimer = null;

  async function renderMatrix() {
    const m = await api("matrix", Object.assign({ level: state.level, category: state.cat, encoding: "b64" }, windowParams()));
    m.values = decodeF64(m.values_b64); delete m.values_b64;
    M = m;
    performance.mark("matrix-data");
    const n = m.labels.length;
    const info = (m.source === "none" ? "no data yet" : (m.source + ": " + fmtTime(m.start_ms) + " – " + fmtTime(m.end_ms).slice(11)) +
      " · " + n + " × " + n + " · " + m.nonzero + " cells · " + fmtBytes(m.total_bytes) +
      " (" + fmtRate(m.total_bytes * 8 / m.duration_s) + ")") + (m.answered ? " · from " + m.answered : "");
    $("m-info").textContent = info;
    drawMatrix(m);
    performance.mark("matrix-painted");  // bench/console.py: time to first paint of the matrix
  }

  function drawMatrix(m) {
    const cv = $("m-canvas");
    const n = m.labels.length;
    const avail = Math.max(400, Math.min(window.innerWidth - 140, window.innerHeight - 150));
    const labelPad = n <= 64 ? 120 : 16;
    // whole pixels per cell while labels are shown; beyond, the n x n image is scaled to the space there is
    const fit = n ? (avail - labelPad - 20) / n : 1;
    const cell = labelPad > 16 ? Math.max(1, Math.min(32, Math.floor(fit))) : Math.max(0.5, fit);
    const side = Math.ceil(labelPad + cell * n + 8);
    const dpr = window.devicePixelRatio || 1;
    cv.width = side * dpr; cv.height = side * dpr; cv.style.width = side + "px"; cv.style.height = side + "px";
    const ctx = cv.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, side, side);
    m._geom = { pad: labelPad, cell, n };
    const list = clear($("m-labels"));  // the labels as text too (screen readers, tests)
    for (const l of m.labels) list.appendChild(el("li", {}, l));
    cv.dataset.nonzero = String(m.nonzero);
    if (!n) return;
    // cells: one ImageData of n x n pixels, scaled up without smoothing
    const img = new ImageData(n, n);
    const lo = Math.log10(Math.max(1, m.min_bytes)); const hi = Math.log10(Math.max(1, m.max_bytes));
    const span = Math.max(1e-9, hi - lo);
    const v = m.values; const px = img.data;
    for (let k = 0; k < n * n; k++) {
      const b = v[k]; const o = k * 4;
      if (b > 0) {
        const t = hi > lo ? (Math.log10(b) - lo) / span : 1;
        const c = Math.min(255, Math.max(0, Math.round(t * 255))) * 3;
        px[o] = LUT[c]; px[o + 1] = LUT[c + 1]; px[o + 2] = LUT[c + 2]; px[o + 3] = 255;
      } else { px[o] = 22; px[o + 1] = 28; px[o + 2] = 35; px[o + 3] = 255; }
    }
    const off = document.createElement("canvas"); off.width = n; off.height = n;
    off.getContext("2d").putImageData(img, 0, 0);
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(off, labelPad, labelPad, cell * n, cell * n);
    // job / switch blocks
    ctx.strokeStyle = "rgba(255,255,255,0.35)"; ctx.lineWidth = 1;
    for (const b of m.blocks) {
      const x0 = labelPad + b.start * cell; const w = (b.end - b.start) * cell;
      ctx.strokeRect(x0 + 0.5, labelPad + 0.5, w, n * cell);
      ctx.strokeRect(labelPad + 0.5, x0 + 0.5, n * cell, w);
    }
    ctx.strokeStyle = "rgba(79,163,224,0.9)"; ctx.lineWidth = 2;  // switches: heavier outlines
    for (const b of m.switches || []) {
      const x0 = labelPad + b.start * cell; const w = (b.end - b.start) * cell;
      ctx.strokeRect(x0, x0, w, w);
    }
    ctx.lineWidth = 1;
    ctx.fillStyle = "#d8dee6"; ctx.font = "11px system-ui, sans-serif";
    if (labelPad > 16) {
      ctx.textBaseline = "middle";
      for (let i = 0; i < n; i++) {
        const y = labelPad + i * cell + cell / 2;
        ctx.textAlign = "right"; ctx.fillText(clip(m.labels[i], 18), labelPad - 4, y);
        ctx.save(); ctx.translate(labelPad + i * cell + cell / 2, labelPad - 4); ctx.rotate(-Math.PI / 2);
        ctx.textAlign = "left"; ctx.fillText(clip(m.labels[i], 18), 0, 0); ctx.restore();
      }
    } else {
      ctx.textBaseline = "top"; ctx.textAlign = "left"; ctx.fillStyle = "#8a96a3";
      for (const b of m.blocks) ctx.fillText(clip(b.name, 24), labelPad + b.start * cell + 2, 2);
    }
    drawLegend(m);
  }
  function clip(s, k) { s = String(s); return s.length > k ? s.slice(0, k - 1) + "…" : s; }

  function drawLegend(m) {
    const L = clear($("m-legend"));
    const c = el("canvas", { width: "20", height: "200" });
    const g = c.getContext("2d");
    for (let y = 0; y < 200; y++) { const i = Math.round((199 - y) / 199 * 255) * 3; g.fillStyle = "rgb(" + LUT[i] + "," + LUT[i + 1] + "," + LUT[i + 2] + ")"; g.fillRect(0, y, 20, 1); }
    const d = m.duration_s || 1;
    L.appendChild(el("div", {}, fmtRate(m.max_bytes * 8 / d)));
    L.appendChild(c);
    L.appendChild(el("div", {}, fmtRate(m.min_bytes * 8 / d)));
    L.appendChild(el("div", { class: "muted" }, "log scale"));
  }

  function matrixHover(ev) {
    const tip = $("m-tip");
    if (!M || !M._geom || !M.labels.length) { tip.hidden = true; return; }
    const r = $("m-canvas").getBoundingClientRect();
    const { pad, cell, n } = M._geom;
    const i = Math.floor((ev.clientY - r.top - pad) / cell); const j = Math.floor((ev.clientX - r.left - pad) / cell);
    if (i < 0 || j < 0 || i >= n || j >= n) { tip.hidden = true; return; }
    const b = M.values[i * n + j];
    const src = M.labels[i]; const dst = M.labels[j];
    const rows = [["bytes (est.)", fmtBytes(b)], ["rate", fmtRate(b * 8 / M.duration_s)]];
    clear(tip).appendChild(tipBox(src + " → " + dst, rows));
    tip.style.left = (ev.clientX + 14) + "px"; tip.style.top = (ev.clientY + 14) + "px"; tip.hidden = false;
    clearTimeout(tipTimer);
    if (b > 0) tipTimer = setTimeout(async () => {
      try {
        const d = await api("matrix/cell", Object.assign({ level: state.level, src, dst }, windowParams()));
        if (tip.hidden || M.labels[i] !== src) return;
        const more = [["bytes (est.)", fmtBytes(d.bytes_est)], ["rate", fmtRate(d.rate_bps)],
          ["samples", String(d.samples)], ["±95 % (sampling)", d.rel95 === null ? "-" : "±" + fmtPct(d.rel95)]];
        for (const c of d.categories) more.push(["  " + c.category, fmtBytes(c.bytes_est) + " · " + fmtRate(c.rate_bps) + (c.rel95 === null ? "" : " ±" + fmtPct(c.rel95))]);
        clear(tip).appendChild(tipBox(src + " → " + dst, more));
      } catch (e) { /* keep the quick figures */ }
    }, 120);
  }

  // ------------------------------------------------------------------ jobs

  // a job's collective visibility (share of active members whose collectives the flows show; never "idle" when
  // members are active but no collective is seen) and its RoCEv2 operations by type per node (sFlow headers)
  const VIS_TEXT = { visible: "collectives visible", partial: "collectives partly visible", idle: "idle: no member node active",
    serving: "serving: an inference job (frontends send to it), no collectives expected" };
  function renderVisibility(v) {
    const box = clear($("j-vis"));
    if (!v) return;
    const text = v.state === "not_visible" ? v.not_visible_text : VIS_TEXT[v.state];
    const L = v.latest;
    box.appendChild(el("h4", {}, "Collective visibility ",
      el("span", { id: "j-vis-state", class: "vis " + v.state, "data-state": v.state }, text)));
    box.appendChild(el("div", { class: "muted" },
      v.state === "idle" ? (v.windows.length ? "no member of the job's " + v.members + " nodes sent or received in the latest live window"
        : "the console holds no complete matrix window yet") :
        "latest window " + fmtTime(L.start_ms) + ": " + L.seen.length + " of " + L.active.length + " active members send collective / RoCEv2 traffic to another member (" +
        fmtPct(v.share) + ")" + (L.not_seen.length ? " · not seen: " + L.not_seen.join(", ") : "") +
        " · per window: " + v.windows.map((w) => (w.share === null ? "idle" : fmtPct(w.share))).join(" / ")));
    const R = v.roce_ops;
    if (!R.nodes.length) {
      box.appendChild(el("div", { class: "muted" }, "RoCEv2 operations: none seen (they come from BTH opcodes in sFlow header samples; NetFlow/IPFIX carry none)"));
      return;
    }
    const head = el("tr", {}, el("th", {}, "node (sender)"), ...R.ops.map((o) => el("th", { class: "num" }, o.replace("_", " "))));
    const body = el("tbody", {});
    body.appendChild(el("tr", { class: "total" }, el("td", {}, "job"), ...R.ops.map((o) => el("td", { class: "num" }, fmtNum(R.job[o])))));
    for (const n of R.nodes) body.appendChild(el("tr", {}, el("td", {}, n.node), ...R.ops.map((o) => el("td", { class: "num" }, fmtNum(n[o])))));
    box.appendChild(el("table", { id: "j-roce" }, el("caption", { class: "muted" }, "RoCEv2 operations by type, estimated packets over the held windows"),
      el("thead", {}, head), body));
  }
  function fmtNum(x) { return x >= 1e9 ? (x / 1e9).toFixed(1) + " G" : x >= 1e6 ? (x / 1e6).toFixed(1) + " M" : x >= 1e3 ? (x / 1e3).toFixed(1) + " k" : String(x); }

  async function renderJobs() {
    const jobs = (await api("jobs")).jobs;
    const sel = $("j-job");
    if (sel.options.length !== jobs.length) {
      clear(sel);
      for (const j of jobs) sel.appendChild(el("option", { value: j.name }, j.name));
    }
    if (!jobs.length) { $("j-info").textContent = "no jobs in the inventory or the data"; return; }
    // no job chosen: the first with straggler scores in the live window (a training job: scores, rates to its
    // peers and straggler windows besides each node's traffic)
    const name = state.job && jobs.some((j) => j.name === state.job) ? state.job :
      (jobs.find((j) => j.live_scores > 0) || jobs[0]).name;
    sel.value = name;
    const d = await api("job", Object.assign({ name }, timeParams()));
    renderVisibility(d.visibility);
    // change markers, and for an archive range the job's steps: fetched before anything is drawn
    const mk = await marksFor({ job: name });
    const st = state.mode === "range" ? await api("steps", Object.assign({ job: name }, timeParams())).catch(() => null) : null;
    // the small multiples: each node's send/receive rate over all its traffic (d.traffic, every job with nodes);
    // the rates its straggler scores carry (traffic to the job's peers) are thinner lines where it was scored
    const tr = d.traffic;
    const scoredBy = new Map(d.nodes.map((n) => [n.node, n]));
    const nodes = tr.nodes.slice(0, 48);
    const anyScores = d.nodes.some((n) => n.t.length);
    const per = 56, top = 30;
    const period = d.iteration_period_ms ? (d.iteration_period_ms / 1000).toFixed(2) + " s" : "-";
    $("j-info").textContent = d.source + " · " + tr.nodes.length + " nodes" + (tr.nodes.length > nodes.length ? " (first 48 shown)" : "") +
      " · iteration period " + period + (d.pattern_period_ms.baseline > 0 ? " (pattern baseline " + (d.pattern_period_ms.baseline / 1000).toFixed(2) + " s)" : "") +
      " · stragglers: " + ([...new Set(d.stragglers.map((s) => s.entity))].join(", ") || "none") +
      " · bands: blue = communication, green = dataset reads, amber = checkpoint writes" + (d.answered ? " · from " + d.answered : "") +
      (!tr.t.length ? " · no traffic: " + (tr.source === "live" ? "the console holds no matrix window yet" : "no flows of these nodes in the range") : "") +
      (!anyScores ? " · no straggler scores: the straggler detector scored no node of " + name +
        " here (it scores the nodes of jobs that exchange collective/RoCEv2 traffic with enough peers)" : "");
    const every = tr.source === "live" ? "per matrix window" : "per " + (tr.bin_ms >= 60000 ? tr.bin_ms / 60000 + " min" : tr.bin_ms / 1000 + " s") + " bin";
    $("j-caption").textContent = "sent / received: all traffic of each node (every peer and category, not only traffic inside the job), " +
      every + (tr.answered ? " from " + tr.answered : tr.source === "live" ? " held live" : "") +
      (anyScores ? " · thin dotted: to / from the job's peers (collective/RoCEv2, from the straggler scores) · z: latest straggler score · red: straggler windows" : "");
    $("j-chart").style.height = (top + nodes.length * per + 60) + "px";
    const c = chart("j-chart"); c.resize();
    const grids = [], xs = [], ys = [], series = [];
    const bands = d.bands.map((b) => [{ xAxis: b.start_ms, itemStyle: { color: PHASE_COLOR[b.phase] } }, { xAxis: b.end_ms }]);
    const changeLines = window.fabricflowMarks.changeLines(mk.changes.filter((c) => c.time_ms >= d.start_ms && c.time_ms <= d.end_ms));
    let stepInfo = "";
    if (st && st.total) {  // steps aligned with the flows (only from the archive): stretched ones in red
      for (const r of st.steps) if (r.stretched) bands.push([{ xAxis: r.start_ms, itemStyle: { color: "rgba(255,90,95,0.35)" } }, { xAxis: r.end_ms }]);
      stepInfo = " · " + st.total + " steps from step marks, " + st.stretched + " with a stretched communication phase (red)";
    }
    if (mk.changes.length) stepInfo += " · " + mk.changes.length + " change" + (mk.changes.length > 1 ? "s" : "") + " (amber lines)";
    $("j-info").textContent += stepInfo;
    const names = { sent: "sent (all traffic)", recv: "received (all traffic)", psent: "sent to job peers", precv: "received from job peers" };
    nodes.forEach((n, k) => {
      const sc = scoredBy.get(n.node) || { t: [], sent_bps: [], recv_bps: [], score: [], straggler: [] };
      grids.push({ left: 210, right: 30, top: top + k * per, height: per - 14 });
      xs.push({ type: "time", gridIndex: k, min: d.start_ms, max: d.end_ms, axisLabel: { show: k === nodes.length - 1, color: "#8a96a3" }, splitLine: { show: false } });
      const lastScore = sc.score.length ? sc.score[sc.score.length - 1] : null;
      ys.push({ type: "value", gridIndex: k, name: n.node + (lastScore === null ? "" : "  z " + lastScore.toFixed(1)), nameLocation: "middle", nameRotate: 0, nameGap: 70, nameTextStyle: { color: sc.straggler.some(Boolean) ? "#f0b429" : "#d8dee6", align: "right" },
        axisLabel: { show: true, fontSize: 9, color: "#8a96a3", formatter: (v) => (v ? fmtRate(v) : "") }, splitLine: { show: false }, splitNumber: 1 });
      const strag = [];
      sc.t.forEach((t, i) => { if (sc.straggler[i]) strag.push([{ xAxis: t, itemStyle: { color: "rgba(255,90,95,0.25)" } }, { xAxis: t + (d.bin_ms > 10000 ? d.bin_ms : 10000) }]); });
      series.push({ name: names.sent, type: "line", xAxisIndex: k, yAxisIndex: k, showSymbol: false, data: tr.t.map((t, i) => [t, n.sent_bps[i]]),
        lineStyle: { color: "#4fa3e0" }, itemStyle: { color: "#4fa3e0" }, markArea: { silent: true, data: bands.concat(strag) },
        markLine: { silent: true, symbol: "none", data: k === 0 ? changeLines : changeLines.map((l) => Object.assign({}, l, { label: { show: false } })) } });
      series.push({ name: names.recv, type: "line", xAxisIndex: k, yAxisIndex: k, showSymbol: false, data: tr.t.map((t, i) => [t, n.recv_bps[i]]),
        lineStyle: { color: "#3ecf8e", type: "dashed" }, itemStyle: { color: "#3ecf8e" } });
      if (sc.t.length) {
        series.push({ name: names.psent, type: "line", xAxisIndex: k, yAxisIndex: k, showSymbol: false, data: sc.t.map((t, i) => [t, sc.sent_bps[i]]),
          lineStyle: { color: "#9fd0f5", width: 1, type: "dotted" }, itemStyle: { color: "#9fd0f5" } });
        series.push({ name: names.precv, type: "line", xAxisIndex: k, yAxisIndex: k, showSymbol: false, data: sc.t.map((t, i) => [t, sc.recv_bps[i]]),
          lineStyle: { color: "#9be8c4", width: 1, type: "dotted" }, itemStyle: { color: "#9be8c4" } });
      }
    });
    c.setOption({ backgroundColor: "transparent", animation: false, textStyle: { color: "#d8dee6" },
      legend: { data: [names.sent, names.recv].concat(anyScores ? [names.psent, names.precv] : []), textStyle: { color: "#d8dee6" }, top: 0 },
      tooltip: { trigger: "axis", formatter: (ps) => tipBox(fmtTime(ps[0].value[0]), ps.map((p) => [nodes[p.axisIndex] ? nodes[p.axisIndex].node + " " + p.seriesName : p.seriesName, fmtRate(p.value[1])])) },
      axisPointer: { link: [{ xAxisIndex: "all" }] }, grid: grids, xAxis: xs, yAxis: ys, series }, true);
  }

  // ------------------------------------------------------------------ events

  let EVENTS = [];
  async function renderEvents() {
    const types = state.types || EVENT_TYPES.join(",");
    const d = await api("events", Object.assign({ types, q: state.q, limit: 2000 }, timeParams()));
    EVENTS = d.events;
    $("e-info").textContent = d.source + " · " + d.total + " events" + (d.truncated ? " (newest " + d.events.length + " shown)" : "");
    const tb = clear(document.querySelector("#e-table tbody"));
    for (const e of EVENTS.slice().reverse()) {
      const tr = el("tr", { "data-id": e.id, class: state.event === e.id ? "selected" : "" },
        el("td", {}, fmtTime(e.start_ms)), el("td", { class: "sev-" + e.severity }, e.type + (e.subtype && e.subtype !== e.type ? " / " + e.subtype : "")),
        el("td", {}, e.entity), el("td", { class: e.diagnosis ? "dg-" + e.diagnosis.verdict : "muted" }, e.diagnosis ? e.diagnosis.title : ""),
        el("td", {}, e.summary));
      tr.addEventListener("click", () => setState({ event: e.id }));
      tb.appendChild(tr);
    }
    const ys = EVENT_TYPES;
    // overlapping events of one type get their own lanes inside the type's row
    const lanes = EVENTS.map(() => 0); const laneCount = {};
    for (const t of ys) {
      const ends = [];
      EVENTS.forEach((e, k) => {
        if (e.type !== t) return;
        let l = ends.findIndex((end) => end < e.start_ms);
        if (l < 0) { l = ends.length; ends.push(0); }
        ends[l] = Math.max(e.end_ms, e.start_ms + 1); lanes[k] = l;
      });
      laneCount[t] = Math.max(1, ends.length);
    }
    const mk = await marksFor({});  // every change marker of the range (cluster-wide ones and all scoped ones)
    chart("e-chart").setOption({ backgroundColor: "transparent", animation: false, textStyle: { color: "#d8dee6" },
      grid: { left: 80, right: 20, top: 18, bottom: 30 },
      tooltip: { trigger: "item", formatter: (p) => { const e = EVENTS[p.dataIndex]; return e ? tipBox(e.type + " · " + e.entity, [["start", fmtTime(e.start_ms)], ["end", fmtTime(e.end_ms)], ["", e.summary]]) : ""; } },
      xAxis: Object.assign({ type: "time" }, state.mode === "range" && state.from ? { min: +state.from, max: +state.to } : {}),
      yAxis: { type: "category", data: ys },
      series: [{ type: "custom", renderItem: (params, api2) => {
        const s = api2.coord([api2.value(0), api2.value(2)]); const e = api2.coord([api2.value(1), api2.value(2)]);
        const band = api2.size([0, 1])[1] * 0.7; const n = api2.value(4); const h = band / n;
        const y = s[1] - band / 2 + api2.value(3) * h;
        return { type: "rect", shape: { x: s[0], y: y + 1, width: Math.max(4, e[0] - s[0]), height: Math.max(2, h - 2) },
          style: { fill: api2.visual("color") } };
      }, encode: { x: [0, 1], y: 2 },
      data: EVENTS.map((e, k) => ({ value: [e.start_ms, e.end_ms, ys.indexOf(e.type), lanes[k], laneCount[e.type]],
        itemStyle: { color: TYPE_COLOR[e.type] } })),
        markLine: { silent: true, symbol: "none", data: window.fabricflowMarks.changeLines(mk.changes) } }],
    }, true);
    if (state.event) await renderEventDetail(); else $("e-detail").hidden = true;
  }
  async function renderEventDetail() {
    const box = $("e-detail");
    let d;
    try { d = await api("event", Object.assign({ id: state.event }, timeParams())); }
    catch (err) { clear(box).appendChild(el("div", { class: "muted" }, String(err.message))); box.hidden = false; return; }
    const e = d.event;
    clear(box);
    box.appendChild(el("h3", { class: "sev-" + e.severity }, e.type + " · " + e.entity));
    box.appendChild(el("div", {}, e.summary));
    box.appendChild(el("div", { class: "muted" }, fmtTime(e.start_ms) + " – " + fmtTime(e.end_ms) + " · " + e.state));
    const evidence = window.fabricflowEvidence(helpers());
    if (e.diagnosis) box.appendChild(evidence.diagnosisBox(e.diagnosis));
    box.appendChild(el("h4", {}, "Evidence")); box.appendChild(evidence.kvTable(e.evidence));
    box.appendChild(el("h4", {}, "Uncertainty")); box.appendChild(evidence.kvTable(e.uncertainty));
    box.appendChild(el("h4", {}, "Related events (" + d.related.length + ")"));
    const ul = el("ul", {});
    for (const r of d.related) {
      const a = el("a", { class: "rel" }, r.type + " · " + r.summary);
      a.addEventListener("click", () => setState({ event: r.id }));
      ul.appendChild(el("li", {}, a, el("span", { class: "muted" }, " — " + r.reason)));
    }
    if (!d.related.length) ul.appendChild(el("li", { class: "muted" }, "none"));
    box.appendChild(ul);
    const fr = d.flows_range;
    box.appendChild(el("h4", {}, "Top flows " + fmtTime(fr.start_ms).slice(11) + " – " + fmtTime(fr.end_ms).slice(11) +
      (fr.dst ? " to " + fr.dst : fr.node ? " of " + fr.node : "") + " (archive)"));
    if (d.flows_error) box.appendChild(el("div", { class: "muted" }, d.flows_error));
    const t = el("table", { id: "e-flows" });
    t.appendChild(el("tr", {}, ...["proto", "source", "destination", "bytes (est.)", "packets (est.)", "sampled", "exporter", "rate 1:N"].map((h) => el("th", {}, h))));
    for (const f of d.flows) {
      t.appendChild(el("tr", { "data-dst": f.dst_node },
        el("td", {}, String(f.ip_protocol)),
        el("td", {}, f.src_addr + ":" + f.src_port + (f.src_node ? " (" + f.src_node + ")" : "")),
        el("td", {}, f.dst_addr + ":" + f.dst_port + (f.dst_node ? " (" + f.dst_node + ")" : "")),
        el("td", { class: "num" }, fmtBytes(f.bytes_est)), el("td", { class: "num" }, String(f.packets_est)),
        el("td", { class: "num" }, f.packets + " pkt / " + fmtBytes(f.bytes)),
        el("td", {}, f.exporter_addr), el("td", { class: "num" }, String(f.sampling_rate))));
    }
    if (!d.flows.length && !d.flows_error) t.appendChild(el("tr", {}, el("td", { colspan: "8", class: "muted" }, "no archived flows in this window yet")));
    box.appendChild(t);
    box.hidden = false;
  }

  // ------------------------------------------------------------------ render loop

  let rendering = false, again = false;
  async function render(fromLive) {
    if (rendering) { again = true; return; }
    rendering = true;
    try {
      if (!fromLive || state.view === "matrix") await loadWindows();
      const extra = (window.fabricflowViews || {})[state.view];  // compare.js, topology.js, exporters.js, topn.js
      const fn = { matrix: renderMatrix, jobs: renderJobs, events: renderEvents }[state.view] ||
        (extra && (() => extra(helpers())));
      await fn();
      document.body.dataset.rendered = state.view;
    } catch (e) {
      const info = $({ matrix: "m-info", topology: "o-info", jobs: "j-info", events: "e-info", topn: "n-info", compare: "c-info" }[state.view]);
      if (info) info.textContent = "could not load: " + e.message;
      document.body.dataset.rendered = state.view + ":error";
    } finally {
      rendering = false;
      if (again) { again = false; render(true); }
    }
  }

  function wire() {
    for (const b of document.querySelectorAll("#tabs button")) b.addEventListener("click", () => setState({ view: b.dataset.view }));
    $("t-live").addEventListener("click", () => { stopPlay(); setState({ mode: "live", window: "", from: "", to: "" }); });
    $("t-window").addEventListener("input", (e) => {
      const w = liveWindows[+e.target.value]; stopPlay();
      if (w) setState({ mode: "live", window: e.target.value == liveWindows.length - 1 ? "" : String(w.start_ms), from: "", to: "" });
    });
    $("t-play").addEventListener("click", () => {
      if (playing) { stopPlay(); return; }
      if (!liveWindows.length) return;
      let k = 0;
      playing = setInterval(() => {
        if (k >= liveWindows.length) { stopPlay(); setState({ window: "" }); return; }
        setState({ mode: "live", window: String(liveWindows[k++].start_ms), from: "", to: "" });
      }, 800);
      syncControls();
    });
    $("t-apply").addEventListener("click", () => {
      const f = fromLocalInput($("t-from").value), t = fromLocalInput($("t-to").value);
      if (isFinite(f) && isFinite(t) && t > f) { stopPlay(); setState({ mode: "range", from: String(f), to: String(t), window: "" }); }
    });
    $("t-quick").addEventListener("change", (e) => {
      const v = e.target.value; if (!v) return;
      const ms = { "15m": 9e5, "1h": 36e5, "6h": 216e5, "24h": 864e5 }[v]; const now = Date.now();
      e.target.value = ""; stopPlay();
      setState({ mode: "range", from: String(now - ms), to: String(now), window: "" });
    });
    $("m-level").addEventListener("change", (e) => setState({ level: e.target.value }));
    $("n-level").addEventListener("change", (e) => setState({ nlevel: e.target.value }));
    $("n-n").addEventListener("change", (e) => setState({ n: String(Math.max(1, Math.min(200, +e.target.value || 10))) }));
    chips($("m-cats"), CATEGORIES, () => setState({ cat: checked("m-cats").join(",") }));
    chips($("n-cats"), CATEGORIES, () => setState({ ncat: checked("n-cats").join(",") }));
    chips($("e-types"), EVENT_TYPES, () => { const c = checked("e-types"); setState({ types: c.length === EVENT_TYPES.length ? "" : c.join(",") }); });
    let qTimer = null;
    $("e-q").addEventListener("input", (e) => { clearTimeout(qTimer); qTimer = setTimeout(() => setState({ q: e.target.value }), 300); });
    $("j-job").addEventListener("change", (e) => setState({ job: e.target.value }));
    $("m-canvas").addEventListener("mousemove", matrixHover);
    $("m-canvas").addEventListener("mouseleave", () => { $("m-tip").hidden = true; });
    window.addEventListener("hashchange", () => { state = readHash(); syncControls(); render(); });
    window.addEventListener("resize", () => { for (const c of Object.values(charts)) c.resize(); if (M && state.view === "matrix") drawMatrix(M); });
  }
  function stopPlay() { if (playing) { clearInterval(playing); playing = null; } }
  function helpers() {  // what the views in their own files use
    return { api, el, clear, chart, state, setState, fmtBytes, fmtRate, fmtPct, fmtTime, toLocalInput, fromLocalInput, timeParams,
      windowParams, clip, tipBox, marksFor, token: TOKEN };
  }
  async function marksFor(params) {  // change markers (and step marks) for a time chart; none when the API fails
    try { return await api("marks", Object.assign(params, timeParams())); } catch (e) { return { changes: [], steps: [] }; }
  }

  window.fabricflowConsole = { matrix: () => M, state: () => Object.assign({}, state) };  // for tests and benchmarks
  state = readHash();
  wire();
  syncControls();
  refreshStatus();
  startStream();
  setInterval(refreshStatus, 5000);
  render();
})();
