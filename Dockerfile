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
COPY console ./console
RUN pip install --no-cache-dir . && useradd --system --uid 10001 fabricflow
USER fabricflow
ENTRYPOINT ["fabricflow"]
CMD ["--help"]
