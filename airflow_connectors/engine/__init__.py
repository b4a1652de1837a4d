"""Layer 4: the engine. Discovery and planning run without Spark; batches run in Spark.

Nothing here imports pyspark at import time; :mod:`.datasource` and :mod:`.spark` do,
and are imported only when a batch runs.
"""
