/* fabricflow console: the Topology view. A graph of spines, leaves and nodes (nodes folded into one bubble per
 * rack / leaf / group above ~64 nodes; a click on a bubble opens it), links coloured by utilisation and health from
 * the interface counters, a link's drill-down over time, and the per-rail view. Loaded before console.js, which
 * calls window.fabricflowViews.topology(h) with its helpers. Names go into the page as text only (ECharts' canvas,
 * tooltips built as DOM text, textContent). */
(function () {
  "use strict";

  const BAD = "#ff5a5f", UNKNOWN = "#3a4450";
  const Y = { spine: 50, leaf: 230, bottom: 440, open: 520 };

  function utilColor(u) {  // idle dark blue-grey -> teal at 50 % -> orange at >= 90 %
    if (u === null || u === undefined) return UNKNOWN;
    const t = Math.max(0, Math.min(1, u / 0.9));
    const a = [52, 74, 94], b = [47, 160, 130], c = [230, 110, 40];
    const [x, y, f] = t < 0.55 ? [a, b, t / 0.55] : [b, c, (t - 0.55) / 0.45];
    return "rgb(" + x.map((v, k) => Math.round(v + f * (y[k] - v))).join(",") + ")";
  }
  function linkStyle(state, util) {
    if (state === "down") return { color: BAD, width: 2.5, type: "dashed", opacity: 1 };
    if (state === "degraded") return { color: BAD, width: 3, type: "solid", opacity: 1 };
    return { color: utilColor(util), width: 1.2, type: "solid", opacity: state === "unknown" ? 0.5 : 0.75 };
  }
  function fmtFlags(k) { return (k.health || []).map((f) => f.replace("_", " ")).join(", ") || "healthy"; }

  // ------------------------------------------------------------------ layout

  function spread(items, y, width, margin) {  // x positions evenly over the width
    const n = items.length, w = width - 2 * margin;
    return items.map((it, i) => Object.assign(it, { x: margin + (n === 1 ? w / 2 : (w * i) / (n - 1)), y }));
  }
  function bottomRow(t, expand) {  // groups (collapsed) or nodes, ordered by their first leaf
    const leafRank = new Map(t.leaves.map((l, i) => [l.name, i]));
    if (!t.collapse) {
      const first = new Map();
      for (const k of t.links) if (k.kind === "node" && !first.has(k.node)) first.set(k.node, leafRank.get(k.switch) ?? 1e9);
      return t.nodes.slice().sort((a, b) => (first.get(a.name) ?? 1e9) - (first.get(b.name) ?? 1e9))
        .map((n) => ({ kind: "node", id: "node:" + n.name, name: n.name, node: n }));
    }
    const row = [];
    for (const g of t.groups) {
      if (expand.includes(g.id)) {
        for (const x of g.nodes) row.push({ kind: "node", id: "node:" + x, name: x, group: g.id, open: true });
      } else row.push({ kind: "group", id: g.id, name: g.label, group: g });
    }
    return row;
  }

  function buildGraph(t, width, expand) {
    const nodes = [], edges = [], listed = [];
    const margin = 40;
    const spines = spread(t.spines.map((s) => ({ kind: "spine", id: "sw:" + s.name, name: s.name, sw: s })), Y.spine, width, margin);
    const leaves = spread(t.leaves.map((s) => ({ kind: "leaf", id: "sw:" + s.name, name: s.name, sw: s })), t.spines.length ? Y.leaf : Y.spine + 60, width, margin);
    const row = bottomRow(t, expand);
    const open = row.filter((r) => r.open);
    spread(row.filter((r) => !r.open), Y.bottom, width, margin);
    const leafX = new Map(leaves.map((l) => [l.name, l.x]));
    for (const g of t.groups.filter((x) => expand.includes(x.id))) {  // an open group's nodes under its leaves
      const mine = open.filter((r) => r.group === g.id), xs = g.leaves.map((l) => leafX.get(l)).filter((x) => x !== undefined);
      const mid = xs.length ? (Math.min(...xs) + Math.max(...xs)) / 2 : width / 2;
      const span = Math.min(width - 2 * margin, Math.max(xs.length ? Math.max(...xs) - Math.min(...xs) : 0, 24 * mine.length));
      const lo = Math.max(margin, Math.min(width - margin - span, mid - span / 2));
      mine.forEach((r, i) => Object.assign(r, { x: lo + (mine.length === 1 ? span / 2 : (span * i) / (mine.length - 1)), y: Y.open + 40 }));
    }
    const pos = new Map();
    const big = leaves.length > 24;
    for (const s of spines) {
      pos.set(s.id, s);
      nodes.push({ id: s.id, name: s.name, x: s.x, y: s.y, symbol: "rect", symbolSize: [Math.min(90, width / spines.length - 8), 22],
        itemStyle: { color: "#24425e", borderColor: "#4fa3e0" }, label: { show: true, color: "#d8dee6", fontSize: 11 }, info: s });
    }
    for (const s of leaves) {
      pos.set(s.id, s);
      nodes.push({ id: s.id, name: s.name, x: s.x, y: s.y, symbol: "roundRect", symbolSize: [big ? Math.max(10, width / leaves.length - 6) : 80, 18],
        itemStyle: { color: "#23313f", borderColor: "#7f8fa0" },
        label: { show: true, color: "#d8dee6", fontSize: 10, rotate: big ? 90 : 0, position: big ? "bottom" : "inside",
          distance: 4, formatter: () => (big ? s.name.replace(/^leaf-?/, "") : s.name) }, info: s });
    }
    const groupBad = new Map();
    for (const gl of t.group_links || []) groupBad.set(gl.group, (groupBad.get(gl.group) || 0) + gl.bad);
    for (const r of row) {
      pos.set(r.id, r);
      if (r.kind === "group") {
        const g = r.group, bad = g.bad_links > 0;
        nodes.push({ id: r.id, name: g.label, x: r.x, y: r.y, symbol: "circle", symbolSize: 26 + Math.min(20, Math.sqrt(g.nodes.length) * 3),
          itemStyle: { color: utilColor(g.util_mean), borderColor: bad ? BAD : "#8a96a3", borderWidth: bad ? 3 : 1 },
          label: { show: true, position: "bottom", color: bad ? "#ffb3b5" : "#d8dee6", fontSize: 10, rotate: row.length > 24 ? 45 : 0,
            formatter: () => g.label + " · " + g.nodes.length + (bad ? " · " + g.bad_links + "!" : "") }, info: r });
      } else {
        nodes.push({ id: r.id, name: r.name, x: r.x, y: r.y, symbol: "circle", symbolSize: 10,
          itemStyle: { color: "#4fa3e0", borderColor: r.open ? "#f0b429" : "#0f1419" },
          label: { show: row.length <= 40 || r.open, position: "bottom", rotate: 60, color: "#d8dee6", fontSize: 9 }, info: r });
      }
    }
    const shownNode = new Set(row.filter((r) => r.kind === "node").map((r) => r.name));
    for (const k of t.links) {
      let src, dst;
      if (k.kind === "fabric") { src = "sw:" + k.a.switch; dst = "sw:" + k.b.switch; }
      else if (shownNode.has(k.node)) { src = "node:" + k.node; dst = "sw:" + k.switch; }
      else continue;  // a node link inside a closed bubble: its group link carries it
      if (!pos.has(src) || !pos.has(dst)) continue;
      edges.push({ source: src, target: dst, lineStyle: linkStyle(k.state, k.util), info: { link: k } });
      listed.push({ id: k.id, kind: k.kind, state: k.state, health: k.health, util: k.util, color: linkStyle(k.state, k.util).color,
        text: k.id + (k.kind === "node" ? " ↔ " + k.node + (k.nic ? " " + k.nic : "") : " ↔ " + k.b.switch) });
    }
    for (const gl of t.group_links || []) {
      if (!pos.has(gl.group) || !pos.has("sw:" + gl.switch)) continue;
      const st = gl.state === "ok" || gl.state === "unknown" ? gl.state : "degraded";
      edges.push({ source: gl.group, target: "sw:" + gl.switch, lineStyle: Object.assign(linkStyle(st, gl.util_mean), { width: st === "degraded" ? 3 : 1 + Math.min(3, gl.links / 16) }),
        info: { glink: gl } });
      listed.push({ id: gl.id, kind: "group", state: st, health: gl.health, util: gl.util_mean, color: linkStyle(st, gl.util_mean).color,
        text: gl.group + " → " + gl.switch + " (" + gl.links + " links)" });
    }
    return { nodes, edges, listed, row, open: open.length, height: open.length ? Y.open + 160 : Y.bottom + 130 };
  }

  // ------------------------------------------------------------------ tooltips

  function tip(h, p) {
    const d = p.data.info || {};
    if (d.link) {
      const k = d.link;
      return h.tipBox(k.id + (k.kind === "node" ? " ↔ " + k.node + (k.nic ? " (" + k.nic + (k.rail !== null && k.rail !== undefined ? ", rail " + k.rail : "") + ")" : "") : " ↔ " + k.b.switch + (k.b.if_index !== null ? ":" + k.b.if_index : "")), [
        ["state", k.state + " · " + fmtFlags(k)], ["speed", (k.if_speed ? h.fmtRate(k.if_speed) : "?") + " (configured " + (k.speed_bps ? h.fmtRate(k.speed_bps) : "?") + ")"],
        ["utilisation", h.fmtPct(k.util) + " (in " + h.fmtPct(k.util_in) + ", out " + h.fmtPct(k.util_out) + ")"],
        ["errors/s", k.errors_per_s ?? "-"], ["discards/s", k.discards_per_s ?? "-"], ["oper", k.oper_up === false ? "down" : k.oper_up ? "up" : "?"],
        ["events", (k.events || []).join(", ") || "none"], ["", "click: the link over time"]]);
    }
    if (d.glink) {
      const g = d.glink;
      return h.tipBox(g.group + " → " + g.switch, [["links", String(g.links)], ["with a problem", String(g.bad) + (g.health.length ? " (" + g.health.join(", ") + ")" : "")],
        ["utilisation", "mean " + h.fmtPct(g.util_mean) + ", max " + h.fmtPct(g.util_max)], ["capacity", g.speed_bps ? h.fmtRate(g.speed_bps) : "?"]]);
    }
    if (d.kind === "group") {
      const g = d.group;
      return h.tipBox(g.label + " (" + g.id.split(":")[0] + ")", [["nodes", String(g.nodes.length)], ["leaves", g.leaves.join(", ")],
        ["links", g.links + ", " + g.bad_links + " with a problem"], ["utilisation", "mean " + h.fmtPct(g.util_mean) + ", max " + h.fmtPct(g.util_max)],
        ["", "click: open the group"]]);
    }
    if (d.kind === "node") return h.tipBox(d.name, [["group", d.group || (d.node && d.node.group) || "-"], ["", d.open ? "click: close its group" : ""]]);
    if (d.sw) return h.tipBox(d.name + " (" + d.kind + ")", d.kind === "spine" ? [["links", String(d.sw.links)]] :
      [["nodes", String(d.sw.nodes)], ["uplinks", String(d.sw.uplinks)], ["rail", d.sw.rail ?? "-"]]);
    return h.tipBox(p.name || "", []);
  }

  // ------------------------------------------------------------------ views

  let lastTopo = null;
  async function renderGraph(h) {
    const s = h.state, $ = (id) => document.getElementById(id);
    const expand = s.expand ? s.expand.split(",") : [];
    const t = await h.api("topology", Object.assign({ expand: expand.join(",") }, h.timeParams()));
    performance.mark("topology-data");
    lastTopo = t;
    const box = $("o-graph");
    const width = Math.max(600, box.clientWidth || 1200);
    const g = buildGraph(t, width, expand);
    box.style.height = g.height + "px";
    const c = h.chart("o-graph");
    c.resize();
    c.off("click");
    // a live refresh of the same graph keeps where the user panned and zoomed
    const key = width + "|" + expand.join(",") + "|" + g.nodes.length, old = c.getOption() && c.getOption().series;
    const view = key === box.dataset.viewKey && old && old[0] ? { zoom: old[0].zoom, center: old[0].center } : {};
    box.dataset.viewKey = key;
    c.setOption({ backgroundColor: "transparent", animation: false, tooltip: { confine: true, formatter: (p) => tip(h, p) },
      series: [{ type: "graph", layout: "none", coordinateSystem: null, roam: true, ...view, data: g.nodes, links: g.edges,
        emphasis: { focus: "adjacency", lineStyle: { width: 4 } }, lineStyle: { curveness: 0 }, left: 60, top: 30, right: 60, bottom: g.open ? 90 : 70 }] }, true);
    performance.mark("topology-painted");  // the canvas renderer draws in setOption (bench/console.py reads both marks)
    c.on("click", (p) => {
      const d = p.data.info || {};
      if (d.link) h.setState({ link: d.link.id });
      else if (d.kind === "group") h.setState({ expand: expand.concat([d.id]).join(",") });
      else if (d.kind === "node" && d.open) h.setState({ expand: expand.filter((x) => x !== d.group).join(",") });
    });
    const list = h.clear($("o-links"));
    for (const k of g.listed) list.appendChild(h.el("li", { "data-link": k.id, "data-kind": k.kind, "data-state": k.state, "data-health": (k.health || []).join(","), "data-color": k.color }, k.text));
    const names = h.clear($("o-names"));
    for (const n of g.nodes) names.appendChild(h.el("li", { "data-id": n.id }, n.name));
    const cnt = t.counts;
    $("o-info").textContent = t.source + " · " + cnt.spines + " spines, " + cnt.leaves + " leaves, " + cnt.nodes + " nodes, " + cnt.links + " links · " +
      (cnt.down + cnt.degraded) + " with a problem" + (t.collapse ? " · nodes grouped by " + t.group_by + " (" + t.groups.length + " groups; click one to open it)" : "");
    box.dataset.drawnNodes = String(g.nodes.length);
    box.dataset.drawnLinks = String(g.edges.length);
    if (s.link) await renderLink(h); else $("o-link").hidden = true;
  }

  async function renderLink(h) {
    const $ = (id) => document.getElementById(id);
    const d = await h.api("link", Object.assign({ id: h.state.link }, h.timeParams()));
    $("o-link").hidden = false;
    const now = d.now || {};
    $("o-link-title").textContent = (d.kind === "node" ? d.id + " ↔ " + d.node + (d.nic ? " " + d.nic : "") + (d.rail !== null && d.rail !== undefined ? " (rail " + d.rail + ")" : "") :
      d.ends.map((e) => e.switch + ":" + e.if_index).join(" ↔ ")) + " · " + (now.state || "?") + (now.health && now.health.length ? " (" + fmtFlags(now) + ")" : "") +
      " · " + d.source + (d.answered ? ", from " + d.answered : "");
    const series = [], bands = [];
    const pts = (t, arr) => t.map((x, i) => [x, arr[i] === null ? null : arr[i]]);
    d.ends.forEach((e, i) => {
      const t = e.series.time_ms, tag = d.ends.length > 1 ? " " + e.switch : "";
      series.push({ name: "util in" + tag, type: "line", data: pts(t, e.series.util_in), showSymbol: false },
        { name: "util out" + tag, type: "line", data: pts(t, e.series.util_out), showSymbol: false },
        { name: "errors/s" + tag, type: "line", xAxisIndex: 1, yAxisIndex: 1, data: pts(t, e.series.errors_per_s), showSymbol: false },
        { name: "discards/s" + tag, type: "line", xAxisIndex: 1, yAxisIndex: 1, data: pts(t, e.series.discards_per_s), showSymbol: false });
      e.health.forEach((f, j) => { if (f.length) bands.push([{ xAxis: t[Math.max(0, j - 1)], name: f.join(", ") }, { xAxis: t[j] }]); });
      if (i === 0) series[0].markArea = { silent: true, itemStyle: { color: "rgba(255,90,95,0.18)" }, label: { show: false }, data: bands };
    });
    h.chart("o-link-chart").setOption({ backgroundColor: "transparent", animation: false, textStyle: { color: "#d8dee6" },
      tooltip: { trigger: "axis" }, legend: { top: 0, right: 20, textStyle: { color: "#d8dee6" } },
      grid: [{ left: 60, right: 30, top: 30, height: 115 }, { left: 60, right: 30, top: 205, height: 80 }],
      xAxis: [{ type: "time", gridIndex: 0 }, { type: "time", gridIndex: 1 }],
      yAxis: [{ type: "value", name: "utilisation", gridIndex: 0, axisLabel: { formatter: (v) => Math.round(v * 100) + "%" } },
        { type: "value", name: "per s", gridIndex: 1 }], series }, true);
    $("o-link-chart").dataset.unhealthySamples = String(bands.length);
  }

  async function renderRails(h) {
    const $ = (id) => document.getElementById(id);
    const r = await h.api("rails", h.timeParams());
    const rails = r.rails.map((x) => (x.rail === null ? "(no rail)" : "rail " + x.rail));
    const ok = [], low = [];
    r.rails.forEach((x, i) => {
      for (const n of r.nodes) for (const c of n.nics) {
        if (c.rail !== x.rail) continue;
        const v = (c.in_bps || 0) + (c.out_bps || 0);
        (c.below ? low : ok).push({ value: [i + ((n.node.length * 7 + (c.if_index || 0) * 13) % 100 - 50) / 160, v], node: n.node, nic: c });
      }
    });
    const c = h.chart("o-rails-chart");
    c.setOption({ backgroundColor: "transparent", animation: false, textStyle: { color: "#d8dee6" }, legend: { top: 0, textStyle: { color: "#d8dee6" } },
      tooltip: { formatter: (p) => p.data.nic ? h.tipBox(p.data.node + " " + (p.data.nic.nic || p.data.nic.switch + ":" + p.data.nic.if_index), [
        ["rate", h.fmtRate(p.value[1])], ["share of the node", h.fmtPct(p.data.nic.share) + " (expected " + h.fmtPct(p.data.nic.expected_share) + ")"],
        ["port", p.data.nic.switch + ":" + p.data.nic.if_index]]) : h.tipBox(p.name, [["total", h.fmtRate(p.value)]]) },
      grid: { left: 80, right: 80, top: 50, bottom: 30 },
      xAxis: [{ type: "category", data: rails }, { type: "value", min: -0.5, max: rails.length - 0.5, show: false }],
      yAxis: [{ type: "value", name: "rail total", axisLine: { onZero: false }, axisLabel: { formatter: (v) => h.fmtRate(v) } },
        { type: "value", name: "per NIC", position: "right", axisLine: { onZero: false }, axisLabel: { formatter: (v) => h.fmtRate(v) } }],
      series: [{ name: "rail total (in + out)", type: "bar", data: r.rails.map((x) => x.in_bps + x.out_bps), itemStyle: { color: "rgba(79,163,224,0.35)" } },
        { name: "NIC", type: "scatter", xAxisIndex: 1, yAxisIndex: 1, symbolSize: 4, data: ok, itemStyle: { color: "#3ecf8e", opacity: 0.6 } },
        { name: "NIC below its expected share", type: "scatter", xAxisIndex: 1, yAxisIndex: 1, symbolSize: 11, data: low, itemStyle: { color: BAD } }] }, true);
    const body = h.clear($("o-rails-table").querySelector("tbody"));
    for (const n of r.nodes) for (const x of n.nics) if (x.below) {
      body.appendChild(h.el("tr", { "data-node": n.node, "data-rail": String(x.rail), title: "open this NIC's link over time",
        onclick: () => h.setState({ tsub: "graph", link: x.switch + ":" + x.if_index }) }, h.el("td", {}, n.node), h.el("td", {}, x.nic || "-"),
        h.el("td", {}, x.rail === null ? "-" : String(x.rail)), h.el("td", {}, x.switch + ":" + x.if_index),
        h.el("td", { class: "num" }, h.fmtRate((x.in_bps || 0) + (x.out_bps || 0))), h.el("td", { class: "num" }, h.fmtPct(x.share) + " / " + h.fmtPct(x.expected_share))));
    }
    $("o-rails-table").hidden = !r.flagged;
    $("o-info").textContent = r.source + " · " + r.rails.length + " rails · " + r.nodes.length + " nodes · " + r.flagged +
      " NICs below " + Math.round(r.below_share * 100) + " % of their expected share";
  }

  async function renderTopology(h) {
    const sub = h.state.tsub || "graph", $ = (id) => document.getElementById(id);
    if (h.state.port && !h.state.link) { h.setState({ link: h.state.port, port: "" }, false); }  // an older #port= address
    for (const b of document.querySelectorAll("#o-sub button")) b.classList.toggle("active", b.dataset.sub === sub);
    $("o-graph-wrap").hidden = sub !== "graph";
    $("o-legend").hidden = sub !== "graph";
    $("o-rails").hidden = sub !== "rails";
    if (!$("o-sub").dataset.wired) {
      $("o-sub").dataset.wired = "1";
      for (const b of document.querySelectorAll("#o-sub button")) b.addEventListener("click", () => h.setState({ tsub: b.dataset.sub }));
      $("o-link-close").addEventListener("click", () => h.setState({ link: "" }));
    }
    if (sub === "rails") await renderRails(h); else await renderGraph(h);
  }

  window.fabricflowViews = Object.assign(window.fabricflowViews || {}, { topology: renderTopology });
  window.fabricflowTopology = { last: () => lastTopo, utilColor };
})();
