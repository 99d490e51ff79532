# syntax=docker/dockerfile:1
# One image for every fabricflow service (ingest, processors, sinks, console); the command picks the service.
#
# Two stages. "build" has a C compiler and the Python headers and turns fabricflow and every dependency into
# wheels (`pip wheel`): whatever must be compiled is compiled here, once. The runtime stage installs those
# wheels (pip byte-compiles them at install), has no compiler, and runs as a user without a home directory:
# nothing is compiled or cached when a service starts, so the root file system can be read-only
# (docker-compose.yml: read_only: true). What each service writes, and where: docs/operations.md.
FROM python:3.11-slim AS build
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY fabricflow ./fabricflow
COPY ingest ./ingest
COPY processors ./processors
COPY schemas ./schemas
COPY sinks ./sinks
COPY query ./query
COPY replay ./replay
COPY console ./console
COPY devtools ./devtools
COPY cli ./cli
COPY scenarios ./scenarios
RUN pip wheel --no-cache-dir --wheel-dir /wheels '.[kubernetes]'

FROM python:3.11-slim
# The wheels come from the build stage through a bind mount: they are installed, not kept in a layer.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links /wheels 'fabricflow[kubernetes]' \
 && useradd --system --uid 10001 --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin fabricflow \
 && mkdir -p /var/lib/fabricflow/faust /var/lib/fabricflow/ingest /var/lib/fabricflow/archive \
 && chown -R fabricflow:fabricflow /var/lib/fabricflow
# /var/lib/fabricflow/ingest: ingest's templates (a named volume in docker-compose.yml takes this owner);
# /var/lib/fabricflow/faust: each processors container's own Faust datadir (a tmpfs in docker-compose.yml:
# detector state is restored from Kafka); /var/lib/fabricflow/archive: the archive when archive.url stays file://.
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    FABRICFLOW_PROCESSORS__DATADIR=/var/lib/fabricflow/faust \
    FABRICFLOW_ARCHIVE__URL=file:///var/lib/fabricflow/archive
WORKDIR /var/lib/fabricflow
USER fabricflow
ENTRYPOINT ["fabricflow"]
CMD ["--help"]
