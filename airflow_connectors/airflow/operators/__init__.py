"""The operators of a connector DAG (gate, discover, ingest, finalize, finished)."""
