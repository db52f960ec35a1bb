# syntax=docker/dockerfile:1
# One image for the operator, the Spark drivers and their executors: Python,
# a Java 17 runtime, pyspark and lockgate with its object-store extras (s3, gcs) and Kafka (kafka). What changes least comes first, so
# a code change rebuilds only the last layers: system packages, the user,
# the dependencies (pinned with their hashes in requirements.lock), then the code.
FROM python:3.11-slim-bookworm

RUN apt-get update \
 && apt-get install --yes --no-install-recommends openjdk-17-jre-headless procps tini \
 && rm -rf /var/lib/apt/lists/*

# A fixed non-root uid, so pod securityContexts can say runAsNonRoot and runAsUser.
RUN useradd --uid 10001 --user-group --create-home --shell /usr/sbin/nologin lockgate

ENV VIRTUAL_ENV=/opt/lockgate/venv \
    PATH=/opt/lockgate/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
RUN python -m venv "$VIRTUAL_ENV"
# Spark's executors run from the pyspark installation; its Python workers use this venv.
ENV SPARK_HOME=/opt/lockgate/venv/lib/python3.11/site-packages/pyspark \
    PYSPARK_PYTHON=/opt/lockgate/venv/bin/python \
    SPARK_CONF_DIR=/opt/lockgate/spark-conf

WORKDIR /opt/lockgate/src
# Exactly the versions and files of requirements.lock (scripts/lock.sh makes it
# from pyproject.toml): a file whose SHA-256 differs is refused.
COPY requirements.lock ./
RUN pip install --no-cache-dir --require-hashes --no-deps --requirement requirements.lock \
 && mkdir -p "$SPARK_CONF_DIR"

COPY docker/entrypoint.sh /opt/lockgate/entrypoint.sh
COPY README.md ./
COPY runtime ./runtime
COPY operator ./operator
COPY testing ./testing
COPY console ./console
COPY state ./state
RUN pip install --no-cache-dir --no-deps . \
 && rm -rf build ./*.egg-info
# The example jobs, so the example manifests run on this image as it is.
COPY examples /opt/lockgate/jobs/examples
ENV PYTHONPATH=/opt/lockgate/jobs

USER 10001:10001
WORKDIR /home/lockgate
# 9249: a driver's (or the operator's) metrics; 9250: an executor task's.
EXPOSE 9249 9250
ENTRYPOINT ["/usr/bin/tini", "--", "/opt/lockgate/entrypoint.sh"]
CMD ["lockgate", "--help"]
