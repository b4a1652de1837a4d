"""The application file spark-submit runs for an ingest task.

It lives alone in its folder on purpose: spark-submit puts the script's folder first on
``sys.path``, so nothing beside it may shadow a top-level module (``airflow_connectors``'s
own ``airflow`` subpackage would shadow Airflow if this script sat in the package root).
"""

import sys

from airflow_connectors.engine.job import main

if __name__ == "__main__":
    sys.exit(main())
