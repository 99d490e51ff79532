/* fabricflow console: an event's evidence table and bottleneck diagnosis box (the Events view's detail). Loaded before
 * console.js, which calls window.fabricflowEvidence(h) with its helpers (el and the number formats). Every text from
 * the data goes into the page as text. */
(function () {
  "use strict";

  window.fabricflowEvidence = function (h) {
    const { el, fmtBytes, fmtRate, fmtPct } = h;
    function kvTable(obj) {
      const t = el("table", { class: "kv" });
      for (const [k, v] of Object.entries(obj || {})) {
        if (v === null || v === undefined) continue;
        let text;
        if (Array.isArray(v)) text = v.map((x) => (typeof x === "object" ? Object.values(x).map((y) => typeof y === "number" && Math.abs(y) > 1e6 ? fmtRate(y) : y).join(" ") : x)).join(", ");
        else if (typeof v === "object") text = Object.entries(v).map(([a, b]) => a + "=" + b).join(", ");
        else if (typeof v === "number" && /bps$/.test(k)) text = fmtRate(v);
        else if (typeof v === "number" && /(fraction|util|rel95)/.test(k)) text = fmtPct(v);
        else if (typeof v === "number" && /bytes/.test(k)) text = fmtBytes(v);
        else text = String(v);
        t.appendChild(el("tr", {}, el("td", {}, k), el("td", {}, text)));
      }
      return t;
    }
    function fmtEvidence(x) {
      const f = (v) => (/bps$/.test(x.signal) ? fmtRate(v) : /(share|utilisation)$/.test(x.signal) ? fmtPct(v) :
        Math.abs(v) >= 100 ? String(Math.round(v)) : String(+v.toFixed(3)));
      return f(x.value) + (x.low !== x.high ? " (" + f(x.low) + " – " + f(x.high) + ")" : "");
    }
    function diagnosisBox(dg) {
      // the bottleneck diagnosis: verdict, why, next step, what the data cannot tell, what is missing, evidence
      const box = el("div", { class: "diagnosis dg-" + dg.verdict, id: "e-diagnosis" });
      box.appendChild(el("h4", {}, "Diagnosis: " + dg.title));
      box.appendChild(el("div", {}, dg.summary));
      if (dg.missing && dg.missing.length) {
        box.appendChild(el("div", { class: "dg-label" }, "Missing or contradictory"));
        const ul = el("ul", {}); for (const m of dg.missing) ul.appendChild(el("li", {}, m)); box.appendChild(ul);
      }
      box.appendChild(el("div", { class: "dg-label" }, "Next step")); box.appendChild(el("div", {}, dg.next_step));
      box.appendChild(el("div", { class: "dg-label" }, "What flow data cannot tell")); box.appendChild(el("div", { class: "muted" }, dg.cannot_tell));
      const t = el("table", { class: "dg-evidence" });
      t.appendChild(el("tr", {}, ...["signal", "of", "value (bounds)", "source", "measured"].map((h) => el("th", {}, h))));
      for (const x of dg.evidence || []) {
        t.appendChild(el("tr", {}, el("td", {}, x.signal), el("td", {}, x.subject), el("td", { class: "num" }, fmtEvidence(x)),
          el("td", {}, x.source), el("td", { class: "muted" }, x.note)));
      }
      box.appendChild(t);
      return box;
    }
    return { kvTable, diagnosisBox };
  };
})();
