/* fabricflow console: the Top-N view, a category Sankey and the top talkers (GET /api/topn). Loaded before console.js,
 * which calls window.fabricflowViews.topn(h) with its helpers. Names go into the page as text only (ECharts' canvas). */
(function () {
  "use strict";

  async function renderTopn(h) {
    const { api, state, windowParams, fmtTime, chart, tipBox, fmtBytes, fmtRate, clip } = h;
    const $ = (id) => document.getElementById(id);
    const d = await api("topn", Object.assign({ level: state.nlevel, n: state.n, category: state.ncat }, windowParams()));
    $("n-info").textContent = d.source + " · " + fmtTime(d.start_ms) + " – " + fmtTime(d.end_ms).slice(11) +
      (d.answered ? " · from " + d.answered : "");
    // Sankey: source -> category -> destination (sources and destinations are separate nodes)
    const nodes = new Map(); const links = new Map();
    const add = (a, b, v) => { const k = a + "\u0000" + b; links.set(k, (links.get(k) || 0) + v); nodes.set(a, 1); nodes.set(b, 1); };
    for (const l of d.links) { add("from " + l.src, l.category, l.bytes_est); add(l.category, "to " + l.dst, l.bytes_est); }
    chart("n-sankey").setOption({ backgroundColor: "transparent", animation: false, textStyle: { color: "#d8dee6" },
      title: { text: d.level + " → category → " + d.level, textStyle: { color: "#d8dee6", fontSize: 13 } },
      tooltip: { formatter: (p) => p.dataType === "edge" ? tipBox(p.data.source + " → " + p.data.target, [["bytes (est.)", fmtBytes(p.data.value)]]) : tipBox(p.name, [["bytes (est.)", fmtBytes(p.value)]]) },
      series: [{ type: "sankey", top: 40, left: 10, right: 170, nodeGap: 10, emphasis: { focus: "adjacency" },
        label: { color: "#d8dee6" }, lineStyle: { color: "gradient", opacity: 0.45 },
        data: Array.from(nodes.keys()).map((name) => ({ name })),
        links: Array.from(links.entries()).map(([k, v]) => { const [s, t] = k.split("\u0000"); return { source: s, target: t, value: v }; }) }] }, true);
    const talkers = d.talkers.slice().reverse();
    chart("n-bars").setOption({ backgroundColor: "transparent", animation: false, textStyle: { color: "#d8dee6" },
      title: { text: "top talkers (node pairs)", textStyle: { color: "#d8dee6", fontSize: 13 } },
      grid: { left: 200, right: 40, top: 40, bottom: 30 },
      tooltip: { formatter: (p) => tipBox(p.name, [["bytes (est.)", fmtBytes(talkers[p.dataIndex].bytes_est)], ["rate", fmtRate(talkers[p.dataIndex].rate_bps)]].concat(talkers[p.dataIndex].folded ? [["pairs folded", String(talkers[p.dataIndex].folded)]] : [])) },
      xAxis: { type: "value", axisLabel: { formatter: (v) => fmtRate(v) } },
      yAxis: { type: "category", data: talkers.map((t) => t.folded ? t.src + " (" + t.folded + " pairs)" : clip(t.src, 14) + " → " + clip(t.dst, 14)) },
      series: [{ type: "bar", data: talkers.map((t) => ({ value: t.rate_bps, itemStyle: { color: t.folded ? "#5c6773" : "#4fa3e0" } })) }] }, true);
  }

  window.fabricflowViews = Object.assign(window.fabricflowViews || {}, { topn: renderTopn });
})();
