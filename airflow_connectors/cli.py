"""``airflow-connectors``: validate specs, run pipelines embedded, show connector stats."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

from airflow_connectors.settings import Settings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="airflow-connectors", description="Airflow + Spark ingestion connectors."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser(
        "validate",
        help="check a pipeline spec; prints ok and one line per connector, or every error",
    )
    p.add_argument("spec", type=Path)
    p.add_argument("--pipeline", help="pipeline name for a .sql spec (default: the file's stem)")

    p = sub.add_parser(
        "run", help="run a pipeline on local Spark until no connector finds anything new"
    )
    p.add_argument("spec", type=Path)
    p.add_argument("--pipeline", help="pipeline name for a .sql spec")
    p.add_argument("--connector", metavar="TABLE.CONNECTOR", help="run only this connector")
    p.add_argument(
        "--max-rounds",
        type=int,
        help="stop after this many discovery rounds (for unbounded sources)",
    )
    p.add_argument(
        "--show",
        type=int,
        default=5,
        metavar="N",
        help="print the first N rows of each table (default 5)",
    )
    _store_flags(p)

    p = sub.add_parser("stats", help="a connector's status in Feldera's shape")
    p.add_argument("pipeline")
    p.add_argument("table")
    p.add_argument("connector")
    p.add_argument("--json", action="store_true", help="print JSON")
    _store_flags(p)

    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    for noisy in ("py4j", "httpx"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    handler = {"validate": _validate, "run": _run, "stats": _stats}[args.command]
    return handler(args)


def _store_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--state-store-url",
        help="SQLAlchemy URL (default: [connectors] state_store_url, else SQLite under $AIRFLOW_HOME/connectors)",
    )
    p.add_argument(
        "--warehouse", help="folder of the Parquet tables (default: [connectors] warehouse)"
    )


def _load(args: argparse.Namespace) -> Any:
    from airflow_connectors.spec import SpecValidationError, load_pipeline

    try:
        return load_pipeline(args.spec, pipeline=args.pipeline)
    except SpecValidationError as e:
        for err in e.errors:
            print(f"{args.spec}: {err}", file=sys.stderr)
        return None


def _validate(args: argparse.Namespace) -> int:
    from airflow_connectors.transports import TRANSPORTS

    spec = _load(args)
    if spec is None:
        return 1
    print("ok")
    for table, c in spec.connectors():
        cls = TRANSPORTS.get(c.transport.name)
        transport = cls(cls.Config.model_validate(c.transport.config), table)
        fmt = f" format={c.format.name}" if c.format else ""
        flags = [
            f
            for f in (
                "paused" if c.paused else "",
                f"labels={','.join(c.labels)}" if c.labels else "",
                f"start_after={','.join(c.start_after)}" if c.start_after else "",
            )
            if f
        ]
        print(
            f"{spec.name}.{table.name}.{c.name}: {transport.describe()}{fmt} tasks_max={c.tasks_max} errors={c.errors.tolerance}{' ' + ' '.join(flags) if flags else ''}"
        )
    return 0


def _run(args: argparse.Namespace) -> int:
    from airflow_connectors.engine.batch import BatchFailed
    from airflow_connectors.engine.runner import EmbeddedRunner

    spec = _load(args)
    if spec is None:
        return 1
    settings = Settings.load(state_store_url=args.state_store_url, warehouse=args.warehouse)
    runner = EmbeddedRunner(spec, settings)
    try:
        report = runner.run(only=args.connector, max_rounds=args.max_rounds)
    except BatchFailed as e:
        print(f"run failed: {e}", file=sys.stderr)
        return 1
    except KeyError as e:
        print(f"run failed: {e.args[0]}", file=sys.stderr)
        return 1
    print(
        f"pipeline {spec.name}: {report.batches} batch(es) committed in this run; state store {runner.store.safe_url}; warehouse {settings.warehouse}"
    )
    for ep, rep in report.connectors.items():
        st = runner.store.status(_ref(spec.name, ep))
        total = st.total_records if st else 0
        print(
            f"  {ep}: {rep.status}, +{rep.records} records ({rep.batches} batches, {rep.parse_errors} parse errors) this run, {total} in total"
        )
    _print_tables(spec, runner, args.show)
    return 0


def _ref(pipeline: str, endpoint: str) -> Any:
    from airflow_connectors.state.store import ConnectorRef

    table, _, connector = endpoint.partition(".")
    return ConnectorRef(pipeline, table, connector)


def _print_tables(spec: Any, runner: Any, show: int) -> None:
    import pyarrow.dataset as ds

    from airflow_connectors.engine.context import BatchContext

    for table in spec.tables:
        sink = (
            BatchContext(
                spec.name,
                table,
                table.connectors[0] if table.connectors else None,
                runner.settings.warehouse,
            ).sink()
            if table.connectors
            else None
        )  # type: ignore[arg-type]
        if sink is None:
            continue
        for kind in ("rows", "errors"):
            path = Path(sink.location(kind))
            if not path.is_dir() or not any(path.glob("*.parquet")):
                if kind == "rows":
                    print(f"table {table.name}: no rows yet ({path})")
                continue
            data = ds.dataset(str(path), format="parquet").to_table()
            label = table.name if kind == "rows" else f"{table.name}__errors"
            print(f"table {label}: {data.num_rows} rows at {path}")
            if show and kind == "rows":
                for row in data.slice(0, show).to_pylist():
                    print(f"  {row}")


def _stats(args: argparse.Namespace) -> int:
    from airflow_connectors.state.store import ConnectorRef, StateStore

    settings = Settings.load(state_store_url=args.state_store_url, warehouse=args.warehouse)
    store = StateStore(settings.state_store_url)
    ref = ConnectorRef(args.pipeline, args.table, args.connector)
    st = store.status(ref)
    if st is None:
        known = (
            ", ".join(f"{r.table}.{r.connector}" for r in store.known_connectors(args.pipeline))
            or "(none)"
        )
        print(
            f"No connector named {args.connector} found for table {args.table} in pipeline {args.pipeline} (state store {store.safe_url}); known connectors: {known}",
            file=sys.stderr,
        )
        return 1
    doc = connector_status(st)
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        m = doc["metrics"]
        print(
            f"endpoint_name: {doc['endpoint_name']}  state: {doc['state']}  paused: {doc['paused']}"
        )
        print("metrics: " + ", ".join(f"{k}={v}" for k, v in m.items()))
        print(f"fatal_error: {doc['fatal_error']}")
        for e in doc["parse_errors"]:
            print(f"parse error: {e['message']}")
    return 0


def connector_status(st: Any) -> dict[str, Any]:
    """Feldera's ``InputEndpointStatus`` shape, plus the Kafka Connect ``state``."""
    return {
        "endpoint_name": st.ref.endpoint_name,
        "config": {"stream": st.ref.table},
        "metrics": {
            "total_bytes": st.total_bytes,
            "total_records": st.total_records,
            "buffered_records": st.buffered_records,
            "num_transport_errors": st.num_transport_errors,
            "num_parse_errors": st.num_parse_errors,
            "end_of_input": st.end_of_input,
        },
        "paused": bool(st.paused),
        "state": "PAUSED" if st.paused else st.state,
        "fatal_error": st.fatal_error,
        "parse_errors": st.parse_errors,
        "transport_errors": st.transport_errors,
    }


if __name__ == "__main__":
    sys.exit(main())
