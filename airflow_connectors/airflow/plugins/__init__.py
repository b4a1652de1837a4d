"""The provider's Airflow plugin, registered through the ``airflow.plugins`` entry point."""
