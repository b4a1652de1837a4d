"""Test kits for this package and for third-party plugins; only tests import them.

- :mod:`.conformance`: the transport conformance suite. A transport (built in, or a third
  party's registered by entry point) runs it by subclassing
  :class:`~airflow_connectors.testing.conformance.TransportConformance` and giving a
  ``source`` fixture; see that module.
- :mod:`.jobs`: the ingest job as its own process, SIGKILLed at a named fail point (the
  crash checks of the exactly-once protocol).
- :mod:`.standalone`: embedded ``airflow standalone`` for the quickstart and the
  end-to-end tests.

This ``__init__`` imports nothing: Airflow's processes import
``airflow_connectors.testing.standalone`` (the SQLite connect arguments are named by
module path), and the kit modules import pytest, which those processes must not load.
"""
