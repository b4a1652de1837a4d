"""Test kits for this package and for third-party plugins; only tests import them.

- :mod:`.conformance`: the transport conformance suite. A transport (built in, or a third
  party's registered by entry point) runs it by subclassing
  :class:`~airflow_connectors.testing.conformance.TransportConformance` and giving a
  ``source`` fixture; see that module.
- :mod:`.sink_kit`: the sink conformance suite (crashes at every fail point, concurrent
  publishers, a polling reader, an added column). A sink runs it by subclassing
  :class:`~airflow_connectors.testing.sink_kit.SinkConformance`; see that module.
- :mod:`.jobs`: the ingest job as its own process, SIGKILLed at a named fail point (the
  crash checks of the exactly-once protocol).
- :mod:`.standalone`: embedded ``airflow standalone`` for the quickstart and the
  end-to-end tests; :class:`~airflow_connectors.testing.standalone.AirflowApi`, the REST
  helpers.
- :mod:`.maven`: Java jars (Kafka, Spark's packages) from Maven Central, cached outside
  the repository; :mod:`.kafka`: a real Kafka broker (KRaft) on 127.0.0.1;
  :mod:`.spark_packages`: Spark settings for the Delta, Iceberg and Kafka packages.
- :mod:`.cluster`: the scale-out deployment on 127.0.0.1 (Spark standalone, Airflow with
  the CeleryExecutor, PostgreSQL, S3) for the cluster tests and ``scripts/cluster.sh``.

This ``__init__`` imports nothing: Airflow's processes import
``airflow_connectors.testing.standalone`` (the SQLite connect arguments are named by
module path) and ``airflow_connectors.testing.cluster`` (its ``hostname`` is the cluster's
``[core] hostname_callable``), and the kit modules import pytest, which those processes
must not load.
"""
