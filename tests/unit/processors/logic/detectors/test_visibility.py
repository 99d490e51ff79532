"""collectives_not_visible: a job whose members are active but whose collectives the flows never show raises an
alert (silence is not idle); a job with collectives seen, a quiet job and a lone active member stay quiet."""

from __future__ import annotations

import numpy as np

from processors.logic.detectors.visibility import NOT_VISIBLE, VisibilityConfig, VisibilityDetector
from processors.logic.engine import Engine, EngineConfig
from processors.logic.windows.interning import Interner
from processors.logic.windows.tumbling import WindowConfig

from tests.support.flows import flows

W = 10_000
COLS = ("sn", "dn", "sg", "dg", "sj", "dj", "cat", "sr", "dr")


def cells(interner, rows):
    """Cells from (src node, src job, dst node, dst job, category); node lb01 is in group frontend."""
    c = interner.code
    cols = {k: [] for k in COLS}
    for sn, sj, dn, dj, cat in rows:
        sg = "frontend" if sn == "lb01" else "gpu"
        for k, v in zip(COLS, (sn, dn, sg, "gpu", sj, dj, cat, "r1", "r1")):
            cols[k].append(c(v))
    out = {k: np.array(v, np.int32) for k, v in cols.items()}
    n = len(rows)
    out.update(bytes_est=np.full(n, 10**6, np.int64), samples=np.full(n, 10, np.int64),
               flow_records=np.ones(n, np.int64))
    return out


IB_JOB = [("stor", "", "g1", "j", "storage"), ("stor", "", "g2", "j", "storage"), ("g1", "j", "g2", "j", "ssh")]
ETH_JOB = IB_JOB + [("g1", "j", "g2", "j", "rocev2")]


def run(per_window, windows=8, persist=3):
    det = VisibilityDetector(VisibilityConfig(persist_windows=persist, resolve_windows=2), W)
    interner = Interner([""])
    out = []
    for w in range(windows):
        out += det.on_window(w * W, (w + 1) * W, cells(interner, per_window(w)), interner)
    return det, out


def test_active_members_without_collectives_fire_after_persist_windows():
    _, out = run(lambda w: IB_JOB)
    fired = [a for a in out if a["state"] == "firing"]
    assert [a["dedup_key"] for a in fired] == ["collectives_not_visible|j"]
    a = fired[0]
    assert a["window_end_ms"] == 3 * W  # third window in a row
    assert NOT_VISIBLE in a["summary"] and a["entities"]["active_nodes"] == "2" and a["entities"]["nodes"] == "g1,g2"
    assert a["entities"]["categories"] == "ssh,storage"


def test_collectives_seen_quiet_job_and_lone_member_stay_quiet():
    assert run(lambda w: ETH_JOB)[1] == []
    assert run(lambda w: [("a", "", "b", "", "other")])[1] == []
    assert run(lambda w: [("stor", "", "g1", "j", "storage")])[1] == []  # one active member: min_active 2
    # an inference job: a frontend sends it requests, its replicas answer; no collectives expected
    assert run(lambda w: [("lb01", "", "g1", "j", "other"), ("lb01", "", "g2", "j", "other"),
                          ("g1", "j", "g2", "j", "ssh")])[1] == []


def test_collectives_appearing_reset_evidence_and_resolve():
    _, out = run(lambda w: IB_JOB if w < 4 or w > 5 else ETH_JOB, windows=8)
    states = [(a["state"], a["window_end_ms"] // W) for a in out]
    # fires at 3; collectives in windows 5-6 leave it unseen, so it resolves (resolve_windows 2 after window 4);
    # the evidence of windows 7-8 starts from zero again: no second firing
    assert states[0] == ("firing", 3) and ("resolved", 7) in states
    assert [s for s in states if s[0] == "firing"] == [("firing", 3)]


def test_snapshot_restores_evidence():
    det, _ = run(lambda w: IB_JOB, windows=2)
    det2 = VisibilityDetector(VisibilityConfig(persist_windows=3), W)
    det2.restore(det.snapshot())
    assert det2.evidence == {"j": 2}


def test_engine_raises_it_from_enriched_flows():
    cfg = EngineConfig(window=WindowConfig(size_ms=W, lateness_ms=0), enabled=("matrix", "visibility"))
    e = Engine(cfg)
    out = []
    for w in range(9):
        t = w * W + 500
        out += e.process_flows(flows([
            dict(src="stor", dst="g1", dst_job="j", category="storage", t=t, ip_protocol=6, dst_port=2049),
            dict(src="g2", dst="g1", src_job="j", dst_job="j", category="ssh", t=t, ip_protocol=6, dst_port=22),
        ]))
    out += e.flush()
    alerts = [o for o in out if o.kind == "alert"]
    assert alerts and alerts[0].key == "collectives_not_visible|j" and alerts[0].value["state"] == "firing"
    assert alerts[0].value["window_end_ms"] == 6 * W  # default persist_windows 6
