# One image for every fabricflow service (ingest, processors, sinks, console); the command picks the service.
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY pyproject.toml README.md ./
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
RUN pip install --no-cache-dir . && useradd --system --uid 10001 fabricflow \
 && mkdir -p /var/lib/fabricflow/faust /var/lib/fabricflow/ingest && chown -R fabricflow /var/lib/fabricflow
# /var/lib/fabricflow/ingest: ingest's templates (a named volume in docker-compose.yml takes this owner);
# /var/lib/fabricflow/faust: each processors container's own Faust datadir (state is restored from Kafka).
USER fabricflow
ENTRYPOINT ["fabricflow"]
CMD ["--help"]
