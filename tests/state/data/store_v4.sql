-- A version 4 state store written by airflow-connectors before the catalog (ac_specs)
-- was removed (commit ec9d4b0): discovery planned two batches of a
-- datagen connector and register_specs recorded its spec. Dumped with sqlite3 iterdump.
BEGIN TRANSACTION;
CREATE TABLE ac_batches (
	batch_id INTEGER NOT NULL, 
	pipeline VARCHAR(200) NOT NULL, 
	table_name VARCHAR(200) NOT NULL, 
	connector VARCHAR(100) NOT NULL, 
	status VARCHAR(20) NOT NULL, 
	"plan" JSON NOT NULL, 
	planned_records BIGINT, 
	planned_items INTEGER NOT NULL, 
	planned_bytes BIGINT, 
	attempts INTEGER NOT NULL, 
	attempt VARCHAR(64), 
	records BIGINT, 
	bytes BIGINT, 
	parse_errors BIGINT, 
	created_at FLOAT NOT NULL, 
	committed_at FLOAT, published BOOLEAN NOT NULL DEFAULT FALSE, 
	PRIMARY KEY (batch_id)
);
INSERT INTO "ac_batches" VALUES(1,'p','t','c','planned','{"pipeline": "p", "table": {"name": "t", "columns": [{"name": "id", "type": {"kind": "BIGINT", "precision": null, "scale": null}, "nullable": false}], "sink": {"name": "parquet", "config": {}}}, "connector": {"name": "c", "paused": false, "labels": [], "start_after": null, "transport": {"name": "datagen", "config": {"plan": [{"rate": null, "limit": 5, "worker_chunk_size": 2, "fields": {}}], "seed": null, "workers": 1, "transaction_size": null}}, "format": null, "max_batch_size": 4, "tasks_max": 2, "trigger": null, "errors": {"tolerance": "none"}}, "warehouse": "/tmp/v4/warehouse", "items": [{"key": "plan-0000", "start": 0, "end": 2, "records_done": 0, "size": null, "records": 2, "final": true, "meta": {}}, {"key": "plan-0000", "start": 2, "end": 4, "records_done": 2, "size": null, "records": 2, "final": true, "meta": {}}]}',4,2,4,0,NULL,NULL,NULL,NULL,1.79550373209365200996e+09,NULL,0);
INSERT INTO "ac_batches" VALUES(2,'p','t','c','planned','{"pipeline": "p", "table": {"name": "t", "columns": [{"name": "id", "type": {"kind": "BIGINT", "precision": null, "scale": null}, "nullable": false}], "sink": {"name": "parquet", "config": {}}}, "connector": {"name": "c", "paused": false, "labels": [], "start_after": null, "transport": {"name": "datagen", "config": {"plan": [{"rate": null, "limit": 5, "worker_chunk_size": 2, "fields": {}}], "seed": null, "workers": 1, "transaction_size": null}}, "format": null, "max_batch_size": 4, "tasks_max": 2, "trigger": null, "errors": {"tolerance": "none"}}, "warehouse": "/tmp/v4/warehouse", "items": [{"key": "plan-0000", "start": 4, "end": 5, "records_done": 4, "size": null, "records": 1, "final": true, "meta": {}}]}',1,1,1,0,NULL,NULL,NULL,NULL,1.79550373209365200996e+09,NULL,0);
CREATE TABLE ac_connectors (
	pipeline VARCHAR(200) NOT NULL, 
	table_name VARCHAR(200) NOT NULL, 
	connector VARCHAR(100) NOT NULL, 
	paused BOOLEAN, 
	end_of_input BOOLEAN NOT NULL, 
	total_records BIGINT NOT NULL, 
	total_bytes BIGINT NOT NULL, 
	num_parse_errors BIGINT NOT NULL, 
	num_transport_errors BIGINT NOT NULL, 
	fatal_error TEXT, 
	state VARCHAR(20) NOT NULL, 
	first_discovered_at FLOAT, 
	finished_at FLOAT, 
	lease_owner VARCHAR(200), 
	lease_until FLOAT, 
	updated_at FLOAT NOT NULL, new_data_signal TEXT, finished_signalled_for FLOAT, finished_signal_run VARCHAR(250), stopped BOOLEAN NOT NULL DEFAULT FALSE, 
	PRIMARY KEY (pipeline, table_name, connector)
);
INSERT INTO "ac_connectors" VALUES('p','t','c',NULL,0,0,0,0,0,NULL,'RUNNING',1.79550373209365200996e+09,NULL,NULL,NULL,1.79550373209365200996e+09,NULL,NULL,NULL,0);
CREATE TABLE ac_errors (
	id INTEGER NOT NULL, 
	pipeline VARCHAR(200) NOT NULL, 
	table_name VARCHAR(200) NOT NULL, 
	connector VARCHAR(100) NOT NULL, 
	kind VARCHAR(20) NOT NULL, 
	timestamp FLOAT NOT NULL, 
	message TEXT NOT NULL, 
	source_key VARCHAR(2048), 
	record_number BIGINT, 
	batch_id INTEGER, 
	PRIMARY KEY (id)
);
CREATE TABLE ac_offsets (
	pipeline VARCHAR(200) NOT NULL, 
	table_name VARCHAR(200) NOT NULL, 
	connector VARCHAR(100) NOT NULL, 
	"key" VARCHAR(2048) NOT NULL, 
	"offset" BIGINT NOT NULL, 
	records BIGINT NOT NULL, 
	completed BOOLEAN NOT NULL, 
	meta JSON, 
	batch_id INTEGER NOT NULL, 
	PRIMARY KEY (pipeline, table_name, connector, "key")
);
CREATE TABLE ac_pipelines (
	pipeline VARCHAR(200) NOT NULL, 
	paused BOOLEAN NOT NULL, 
	updated_at FLOAT NOT NULL, 
	PRIMARY KEY (pipeline)
);
CREATE TABLE ac_schema (
	version INTEGER NOT NULL
);
INSERT INTO "ac_schema" VALUES(4);
CREATE TABLE ac_specs (
	pipeline VARCHAR(200) NOT NULL, 
	table_name VARCHAR(200) NOT NULL, 
	connector VARCHAR(100) NOT NULL, 
	spec JSON NOT NULL, 
	digest VARCHAR(64) NOT NULL, 
	updated_at FLOAT NOT NULL, 
	PRIMARY KEY (pipeline, table_name, connector)
);
INSERT INTO "ac_specs" VALUES('p','t','c','{"table": {"name": "t"}, "connector": {"name": "c"}}','f0bbc37e0ffb76401f4159e1d992259b2613ee2e9473fdb5d36b207d86e9c7cd',1.79550373209685683252e+09);
CREATE INDEX ix_ac_batches_connector_status ON ac_batches (pipeline, table_name, connector, status);
COMMIT;
