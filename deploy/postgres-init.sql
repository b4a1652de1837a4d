-- The connector state store lives beside Airflow's metadata DB on the same server.
CREATE DATABASE connectors OWNER airflow;
