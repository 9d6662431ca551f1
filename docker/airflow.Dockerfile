# syntax=docker/dockerfile:1
# Apache Airflow 3.3 (the official image) with the sparkdispatch provider installed.
#
#   docker build -f docker/airflow.Dockerfile -t sparkdispatch-airflow .
ARG AIRFLOW_VERSION=3.3.2
FROM apache/airflow:${AIRFLOW_VERSION}-python3.11
ARG AIRFLOW_VERSION

# pip builds in the source tree, so the airflow user must own it
USER root
RUN mkdir -p /opt/sparkdispatch && chown airflow:0 /opt/sparkdispatch
USER airflow
COPY --chown=airflow:0 pyproject.toml setup.cfg README.md /opt/sparkdispatch/
COPY --chown=airflow:0 provider /opt/sparkdispatch/provider
COPY --chown=airflow:0 hooks /opt/sparkdispatch/hooks
COPY --chown=airflow:0 operators /opt/sparkdispatch/operators
# Naming apache-airflow with its version keeps pip from up- or downgrading Airflow itself
# (https://airflow.apache.org/docs/docker-stack/build.html).
RUN pip install --no-cache-dir "apache-airflow==${AIRFLOW_VERSION}" /opt/sparkdispatch
