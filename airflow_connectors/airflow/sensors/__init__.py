"""Sensors for your own DAGs: wait for new data at a connector's source."""
