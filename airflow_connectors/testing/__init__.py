"""Test kits for this package and for third-party plugins; only tests import them.

- :mod:`.standalone`: embedded ``airflow standalone`` for the quickstart and the
  end-to-end tests.

This ``__init__`` imports nothing: Airflow's processes import
``airflow_connectors.testing.standalone`` (the SQLite connect arguments are named by
module path), and the kit modules import pytest, which those processes must not load.
"""
