"""``GET /connect/v0/pipelines/{p}/tables/{t}/schema`` in a real ``airflow standalone``
API server: a table whose columns are inferred, before and after its schema versions
are stored in the connectors' state store."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from conftest import EndToEnd

from airflow_connectors.spec.models import TableSpec

pytestmark = pytest.mark.airflow_server


def test_table_schema_endpoint(e2e: EndToEnd) -> None:
    import schemathesis
    from schemathesis.specs.openapi.checks import response_schema_conformance

    from airflow_connectors.catalog import parse_pipeline
    from airflow_connectors.engine.discovery import context, discover
    from airflow_connectors.state.store import SchemaColumn, StateStore

    root = e2e.folder("schema_api")
    (root / "src").mkdir(exist_ok=True)
    (root / "src" / "a.json").write_text(json.dumps({"id": 1, "name": "x"}) + "\n")
    doc: dict[str, Any] = {
        "pipeline": "schm",
        "tables": {
            "events": {
                "schema_hints": {"id": "BIGINT NOT NULL"},
                "schema_evolution": "rescue",
                "connectors": [
                    {
                        "name": "files",
                        "transport": {
                            "name": "file_input",
                            "config": {"path": str(root / "src"), "min_file_age": 0},
                        },
                        "format": {"name": "json", "config": {"update_format": "raw"}},
                    }
                ],
            }
        },
    }
    e2e.add({"schm.yaml": yaml.safe_dump(doc)}, ["schm.events.files"])

    def get(path: str) -> Any:
        return e2e.airflow.client.get(f"/connect/v0/pipelines/{path}")

    before = get("schm/tables/EVENTS/schema")  # unquoted table names: any case
    assert before.status_code == 200, before.text
    assert before.json() == {
        "pipeline": "schm",
        "table": "events",
        "inferred": True,
        "schema_evolution": "rescue",
        "schema_hints": {"id": "BIGINT NOT NULL"},
        "primary_key": [],
        "sequence_by": None,
        "version": None,
        "columns": [],
        "versions": [],
    }

    # The first discovery infers version 1 (what the DAG's discover task runs), and a
    # batch adds a column (what schema evolution stores).
    store = StateStore(f"sqlite:///{e2e.root / 'state.db'}")
    spec = parse_pipeline(doc)
    table = spec.tables[0]
    assert isinstance(table, TableSpec)
    discover(store, context(spec, table, table.connectors[0], str(e2e.warehouse)))
    columns = [SchemaColumn("id", "BIGINT", False), SchemaColumn("name", "VARCHAR")]
    store.add_schema_version(
        "schm", "events", [*columns, SchemaColumn("n", "INT")], based_on=1, origin="batch 2"
    )
    store.close()

    answer = get("schm/tables/events/schema")
    assert answer.status_code == 200, answer.text
    view = answer.json()
    assert view["version"] == 2
    assert view["columns"] == [
        {"name": "id", "type": "BIGINT", "nullable": False},
        {"name": "name", "type": "VARCHAR", "nullable": True},
        {"name": "n", "type": "INT", "nullable": True},
        {"name": "_rescued_data", "type": "VARCHAR", "nullable": True},
    ]
    v1, v2 = view["versions"]
    assert (v1["version"], v1["added"], v1["removed"], v1["changed"]) == (1, [], [], [])
    assert v1["origin"] == (
        f"inferred by connector files from 1 object(s): {root / 'src' / 'a.json'}"
    )
    assert [c["name"] for c in v1["columns"]] == ["id", "name"]
    assert v1["created_at"].endswith("Z")
    assert (v2["version"], v2["added"], v2["origin"]) == (2, ["n"], "batch 2")

    missing = get("schm/tables/nope/schema")
    assert missing.status_code == 404
    assert "pipeline 'schm' has no table 'nope'; its tables: events" in missing.json()["message"]
    assert get("nope/tables/events/schema").status_code == 404

    # The answer is the one the OpenAPI document describes.
    schema = schemathesis.openapi.from_dict(e2e.airflow.client.get("/connect/openapi.json").json())
    operation = schema["/v0/pipelines/{pipeline}/tables/{table}/schema"]["GET"]
    case = operation.Case(path_parameters={"pipeline": "schm", "table": "events"})
    auth = {"Authorization": e2e.airflow.client.headers["Authorization"]}
    response = case.call(base_url=f"{e2e.airflow.url}/connect", headers=auth)
    assert response.status_code == 200
    case.validate_response(response, checks=[response_schema_conformance])
