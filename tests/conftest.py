"""Shared fixtures: the embedded stack (default) or testcontainers (FABRICFLOW_TEST_BACKEND=docker).

The session starts one broker (Tansu, memory engine) and one object store
(SeaweedFS) on test ports and stops them at the end. Tests that need them ask
for ``kafka_bootstrap`` / ``s3_fs``. Without the binaries or with Docker
unavailable the tests are skipped, unless ``FABRICFLOW_REQUIRE_BROKER=1``
(CI sets it through `make test`), in which case they fail.
"""

from __future__ import annotations

import logging
import os
import uuid

import pytest

REQUIRE = os.environ.get("FABRICFLOW_REQUIRE_BROKER") == "1"
BACKEND = os.environ.get("FABRICFLOW_TEST_BACKEND", "embedded")
TEST_KAFKA_PORT = int(os.environ.get("FABRICFLOW_TEST_KAFKA_PORT", "29092"))
TEST_S3_PORT = int(os.environ.get("FABRICFLOW_TEST_S3_PORT", "28333"))
TEST_S3_BASE = int(os.environ.get("FABRICFLOW_TEST_S3_BASE_PORT", "28400"))


def _unavailable(msg: str):
    if REQUIRE:
        pytest.fail(f"{msg} (FABRICFLOW_REQUIRE_BROKER=1)")
    pytest.skip(msg)


class Backend:
    """What a test needs to reach the broker and the object store."""

    def __init__(self, bootstrap: str, s3_options: dict, bucket: str, stop):
        self.bootstrap = bootstrap
        self.s3_options = s3_options
        self.bucket = bucket
        self._stop = stop

    def s3fs(self):
        import s3fs

        return s3fs.S3FileSystem(skip_instance_cache=True, **self.s3_options)

    def stop(self):
        self._stop()


def _embedded(tmp_path_factory) -> Backend:
    from fabricflow.settings import load_settings
    from devtools.stack import EmbeddedStack, StackError

    state = tmp_path_factory.mktemp("stack")
    settings = load_settings(
        None,
        stack={
            "state_dir": str(state),
            "kafka_port": TEST_KAFKA_PORT,
            "s3_port": TEST_S3_PORT,
            "s3_base_port": TEST_S3_BASE,
        },
    )
    st = EmbeddedStack(settings)
    try:
        st.up()
    except StackError as e:
        st.down()
        _unavailable(f"embedded stack unavailable: {e}")
    return Backend(st.bootstrap, st.s3_storage_options(), settings.stack.bucket, st.down)


def _docker() -> Backend:
    try:
        from testcontainers.kafka import KafkaContainer
        from testcontainers.minio import MinioContainer
    except ImportError as e:
        _unavailable(f"testcontainers[kafka,minio] not installed: {e}")
    try:
        kafka = KafkaContainer().with_kraft()
        kafka.start()
        minio = MinioContainer()
        minio.start()
    except Exception as e:  # no Docker engine
        _unavailable(f"Docker backend unavailable: {e}")
    cfg = minio.get_config()
    endpoint = "http://" + cfg["endpoint"]
    opts = {"key": cfg["access_key"], "secret": cfg["secret_key"], "client_kwargs": {"endpoint_url": endpoint}}
    import s3fs

    s3fs.S3FileSystem(**opts).mkdir("fabricflow")

    def stop():
        kafka.stop()
        minio.stop()

    return Backend(kafka.get_bootstrap_server(), opts, "fabricflow", stop)


def _external() -> Backend:
    """Services started by scripts/run-tests.sh (`make test`)."""
    from fabricflow.settings import StackSettings

    d = StackSettings()
    opts = {
        "key": d.access_key,
        "secret": d.secret_key.get_secret_value(),
        "client_kwargs": {"endpoint_url": os.environ["FABRICFLOW_TEST_S3_ENDPOINT"], "region_name": "us-east-1"},
    }
    return Backend(os.environ["FABRICFLOW_TEST_BOOTSTRAP"], opts, d.bucket, lambda: None)


@pytest.fixture(scope="session")
def backend(tmp_path_factory):
    if BACKEND == "docker":
        b = _docker()
    elif os.environ.get("FABRICFLOW_TEST_BOOTSTRAP") and os.environ.get("FABRICFLOW_TEST_S3_ENDPOINT"):
        b = _external()
    else:
        b = _embedded(tmp_path_factory)
    yield b
    b.stop()


@pytest.fixture(scope="session")
def kafka_bootstrap(backend) -> str:
    return backend.bootstrap


@pytest.fixture
def s3_fs(backend):
    return backend.s3fs()


@pytest.fixture
def unique_topic():
    """A fresh topic-name prefix per test (topics are never shared between tests)."""
    return f"t{uuid.uuid4().hex[:10]}."


# A real Prometheus on loopback for the monitoring tests (tests/support/prom.py).
from tests.support.prom import prometheus_factory  # noqa: E402,F401


@pytest.fixture(autouse=True)
def _drop_closed_log_handlers():
    """A CLI test run through typer's CliRunner leaves the root logger writing to the runner's stderr, closed
    after the run; later tests' log lines would end in "--- Logging error ---" tracebacks instead."""
    yield
    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, logging.StreamHandler) and getattr(handler.stream, "closed", False):
            root.removeHandler(handler)


@pytest.fixture(scope="session")
def scenario_archive(tmp_path_factory):
    """``get(doc, seed, duration_s) -> (archive dir, inventory file)``: a simulator scenario backfilled offline,
    once per session (tests/support/scenario_archives.py)."""
    from tests.support import scenario_archives

    root = tmp_path_factory.mktemp("scenario-archives")

    def get(doc: dict, seed: int | None = None, duration_s: float | None = None):
        return scenario_archives.build(root, doc, seed, duration_s)

    return get
