# syntax=docker/dockerfile:1
# The sparkdispatch image: masters, TaskExecutors, and the Spark standalone master and worker.
#
# The Spark services run pyspark's own `spark-class` from this image, so the TaskExecutors'
# drivers, the Spark master/worker and the executors all run the very same Spark (pyspark's
# jars) and the same Python 3.11: Spark needs one Spark version across driver and executors,
# and PySpark one Python minor version across driver and Python workers.
#
#   docker build -f docker/sparkdispatch.Dockerfile -t sparkdispatch .
FROM python:3.11-slim-bookworm

RUN apt-get update \
    && apt-get install -y --no-install-recommends default-jre-headless procps \
    && rm -rf /var/lib/apt/lists/*
ENV JAVA_HOME=/usr/lib/jvm/default-java \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYSPARK_PYTHON=python3 \
    SPARK_NO_DAEMONIZE=1

WORKDIR /opt/sparkdispatch
COPY pyproject.toml setup.cfg README.md ./
COPY provider ./provider
COPY hooks ./hooks
COPY operators ./operators
RUN pip install --no-cache-dir ".[master,taskexecutor]" \
    && rm -rf /opt/sparkdispatch/build
COPY docker/healthcheck.py /usr/local/bin/sparkdispatch-healthcheck
COPY docker/sparkdispatch.yaml /etc/sparkdispatch/sparkdispatch.yaml

# storage.dir of the compose cluster: a named volume takes this directory's owner on first use.
RUN useradd --create-home --uid 1000 --user-group sparkdispatch \
    && chmod 0755 /usr/local/bin/sparkdispatch-healthcheck \
    && mkdir -p /var/lib/sparkdispatch /tmp/spark-work \
    && chown sparkdispatch:sparkdispatch /var/lib/sparkdispatch /tmp/spark-work
USER sparkdispatch
WORKDIR /home/sparkdispatch
ENV SPARKDISPATCH_CONF=/etc/sparkdispatch/sparkdispatch.yaml
EXPOSE 8081
CMD ["sparkdispatch", "--help"]
