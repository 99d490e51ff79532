"""Detection quality: every shipped scenario through the whole pipeline, scored against ground truth.

The harness is devtools/scenario_run.py (the end-to-end tests use it too); this is its command line.
How it works: bench/README.md, "bench/detection.py"; results: docs/detection-quality.md.

    .venv/bin/python -m bench.detection                        # all six scenarios, speed 10 (~7 min)
    .venv/bin/python -m bench.detection --scenario incast --speed 20
    .venv/bin/python -m bench.detection --scenario mixed --set pattern.min_acf=0.75
    .venv/bin/python -m bench.detection --report /tmp/detection.json
    .venv/bin/python -m bench.detection --offline --seeds 101,102,103    # no broker: held-out seeds, ~5 s a scenario
    .venv/bin/python -m bench.detection --offline --duration 1800 --born-broken    # 30-minute runs, and each
                                                   # scenario again with its faults active from the jobs' start
"""

import sys

from devtools.scenario_run import main

if __name__ == "__main__":
    sys.exit(main())
