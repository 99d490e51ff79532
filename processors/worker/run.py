"""``fabricflow process``: check the files, wait for Kafka, build the worker and its Faust app, run them.

:class:`~processors.worker.service.Processors` (the stages) and :func:`~processors.worker.faust_app.make_app`
(the Faust wiring around them) are built here, one after the other: neither builds the other.
"""

from __future__ import annotations

import logging

import faust

from fabricflow.settings import Settings

from ..config_files import load_config_files
from .faust_app import make_app
from .publish import OutputPublisher
from .service import Processors

log = logging.getLogger("fabricflow.processors")


def run_processors(settings: Settings) -> int:
    """Check the settings' files, wait for Kafka, then run one worker until Faust stops it (SIGTERM/SIGINT are
    Faust's); flush the outputs on the way out.

    A bad inventory, policy, category rules or TLS file raises (one line, exit 2) before any connection;
    a broker that does not answer within ``kafka.wait_timeout_s`` is logged and gives exit status 1.
    """
    from fabricflow.kafka_security import check_files
    from fabricflow.readiness import Unreachable, wait_for_kafka
    from fabricflow.statedir import writable_dir

    files = load_config_files(settings.processors)
    check_files(settings.kafka)
    writable_dir(settings.processors.datadir, "processors.datadir")  # StateDirError: one line, exit 2
    try:  # before any client exists: no librdkafka reconnect noise while the broker is down
        wait_for_kafka(settings.kafka, log=log)
    except Unreachable as e:
        log.error("%s", e)
        return 1
    proc = Processors(settings, files=files)
    app = make_app(proc)
    p = settings.processors
    svc = proc.service
    svc.ensure_topics(settings.kafka)
    svc.serve_http(p.web_bind, p.metrics_port)
    proc.start_live_jobs()
    svc.on_stop(lambda: _flush_on_exit(proc.publisher, settings.ingest.producer.flush_timeout_s), "output producer")
    app.on_ready = lambda: svc.mark_ready(_consuming(proc, app))
    worker = faust.Worker(app, loglevel=settings.log_level.lower(), quiet=True)
    try:
        worker.execute_from_commandline()
    finally:
        svc.stop()
    return 0


def _consuming(proc: Processors, app) -> str:
    t = proc.settings.kafka.topics
    mine = [tp for tp in app.consumer.assignment() if tp.topic in (t.flows_raw, t.counters_raw, t.discards_raw, t.shuffle)]
    shards = sum(1 for tp in mine if tp.topic == t.shuffle)
    return (f"consuming {len(mine)} partitions ({shards} shuffle shards) as a member of consumer group "
            f"{proc.settings.processors.app_id}")


def _flush_on_exit(publisher: OutputPublisher, timeout_s: float) -> None:
    left = publisher.flush(timeout_s)
    if left:
        log.warning("%d output messages were not delivered before shutdown", left)
