# One image for every service of docker-compose.yaml: Airflow's components (the Celery
# workers among them, which are the Spark drivers of the ingest tasks) run the connector
# DAGs; Spark's master and workers run the batches. The executors get airflow_connectors
# with each job (--py-files) and need only its dependencies, which this image's Python
# ([connectors] executor_python) has. Versions come from the lock.
FROM python:3.11-slim-bookworm

RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps curl \
    && rm -rf /var/lib/apt/lists/*
ENV JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64 \
    AIRFLOW_HOME=/opt/airflow \
    PYSPARK_PYTHON=/usr/local/bin/python \
    PYSPARK_DRIVER_PYTHON=/usr/local/bin/python

WORKDIR /opt/airflow-connectors
COPY requirements.lock ./
RUN pip install --no-cache-dir -r requirements.lock
COPY pyproject.toml README.md ./
COPY airflow_connectors ./airflow_connectors
RUN pip install --no-cache-dir --no-deps .

WORKDIR /opt/airflow
COPY dags ./dags
COPY pipelines ./pipelines
