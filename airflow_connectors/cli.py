"""``airflow-connectors``: validate specs, run pipelines embedded, show connector stats."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_connectors.settings import Settings

#: ``run``'s exit status when it skipped a connector because another run was planning
#: it (sysexits' EX_TEMPFAIL: nothing failed, but the run is not done; run it again).
EXIT_BUSY = 75

if TYPE_CHECKING:
    from airflow_connectors.engine.control import ConnectorControl
    from airflow_connectors.state.store import StateStore


def main(argv: list[str] | None = None) -> int:
    """The ``airflow-connectors`` command: validate, run, stats, pipeline and connector.
    Returns the exit status; a state store that cannot be used is one line and status 1."""
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
        "run",
        help="run a pipeline on local Spark until no connector finds anything new",
        epilog="exit status: 0 done; 1 a connector failed (the others ran); "
        f"{EXIT_BUSY} a connector was skipped because another run was planning it "
        "(run again once that run ends)",
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
    p.add_argument(
        "--debug",
        action="store_true",
        help="log at DEBUG level, with the full traces of failed batches",
    )
    _store_flags(p)

    p = sub.add_parser("stats", help="a connector's status in Feldera's shape")
    p.add_argument("pipeline")
    p.add_argument("table")
    p.add_argument("connector")
    p.add_argument("--json", action="store_true", help="print JSON")
    _store_flags(p)

    p = sub.add_parser(
        "schema",
        help="a table's current columns and its stored schema versions (inferred and evolved)",
    )
    p.add_argument("pipeline")
    p.add_argument("table")
    p.add_argument(
        "--spec",
        type=Path,
        help="the pipeline spec: also shows declared columns, hints and the evolution mode",
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    _store_flags(p)

    p = sub.add_parser(
        "pipeline",
        help="pause, resume or show a pipeline (a paused pipeline runs no connector)",
    )
    p.add_argument("pipeline")
    p.add_argument("action", choices=["pause", "resume", "status"])
    p.add_argument("--json", action="store_true", help="print JSON (status)")
    _store_flags(p)
    _api_flags(p)

    p = sub.add_parser(
        "connector",
        help="start, pause, stop, resume, restart a connector; show its stats or offsets",
        description="As Feldera's `fda connector`. Talks to a running Airflow over the "
        "connector REST API (--url or AIRFLOW_CONNECTORS_API_URL), or with --local to the "
        "embedded state store (what `airflow-connectors run` uses); one of them is "
        "required. A stopped connector runs again only after `resume` (`start` refuses it).",
    )
    p.add_argument("pipeline")
    p.add_argument("table")
    p.add_argument("connector")
    p.add_argument(
        "action", choices=["start", "pause", "stop", "resume", "stats", "restart", "offsets"]
    )
    group = p.add_mutually_exclusive_group()
    group.add_argument("--reset", action="store_true", help="offsets: forget them all (stop first)")
    group.add_argument(
        "--set",
        type=Path,
        metavar="FILE",
        help="offsets: JSON list of entries to set (stop first), as offsets shows them "
        '(Kafka Connect\'s {"partition": {"key": K}, "offset": {"offset", "records", '
        '"completed"}}) or as {"key", "offset", "records", "completed"}',
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    _store_flags(p)
    _api_flags(p)

    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    for noisy in ("py4j", "httpx"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    handler = {
        "validate": _validate,
        "run": _run,
        "stats": _stats,
        "schema": _schema,
        "pipeline": _pipeline,
        "connector": _connector,
    }[args.command]
    try:
        return handler(args)
    except RuntimeError as e:
        from airflow_connectors.settings import SettingsError
        from airflow_connectors.state.store import StateStoreUnavailable

        if not isinstance(e, StateStoreUnavailable | SettingsError):
            raise
        print(e, file=sys.stderr)  # one line: the URL (password masked), why, what to do
        return 1


def _store_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--state-store-url",
        type=_state_store_url,
        help="SQLAlchemy URL (default: [connectors] state_store_url, else SQLite under $AIRFLOW_HOME/connectors)",
    )
    p.add_argument(
        "--warehouse",
        help="folder or s3://bucket/prefix URL of the tables (default: [connectors] warehouse)",
    )


def _state_store_url(value: str) -> str:
    if not value.strip():
        # Not a silent fallback to the default store: the user meant some store.
        raise argparse.ArgumentTypeError(
            "is empty; give a SQLAlchemy URL such as "
            "postgresql+psycopg://USER:PASSWORD@HOST:5432/DATABASE or "
            "sqlite:////PATH/state.db, or leave the flag out to use [connectors] "
            "state_store_url (default: SQLite under $AIRFLOW_HOME/connectors)"
        )
    return value


def _api_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--url",
        help="Airflow's URL, e.g. http://127.0.0.1:8080 (default: $AIRFLOW_CONNECTORS_API_URL)",
    )
    p.add_argument("--username", help="default: $AIRFLOW_CONNECTORS_API_USER, else admin")
    p.add_argument("--password", help="default: $AIRFLOW_CONNECTORS_API_PASSWORD, else admin")
    p.add_argument(
        "--local", action="store_true", help="use the embedded state store, not a running Airflow"
    )


class NoTarget(RuntimeError):
    """Neither a running Airflow (--url) nor --local was given."""


def _client(args: argparse.Namespace, *, required: bool = False) -> Any:
    """The REST client, or None for local mode. ``required``: without --url (or
    $AIRFLOW_CONNECTORS_API_URL) and without --local, refuse rather than fall back to a
    state store nothing may be running from."""
    from airflow_connectors.api_client import ENV_URL, ConnectClient

    if args.local:
        return None
    client = ConnectClient.from_env(args.url, args.username, args.password)
    if client is None and required:
        raise NoTarget(
            f"no Airflow to talk to: give --url http://HOST:8080 (or set {ENV_URL}) to steer "
            "the connector in a running Airflow, or --local to act on the embedded state "
            "store ([connectors] state_store_url, or --state-store-url) and the DAGs of "
            "the Airflow in $AIRFLOW_HOME, if there is one"
        )
    return client


def _load(args: argparse.Namespace) -> Any:
    from airflow_connectors.catalog import load_pipeline
    from airflow_connectors.spec import SpecValidationError
    from airflow_connectors.spec.redact import mask_text

    try:
        return load_pipeline(args.spec, pipeline=args.pipeline)
    except SpecValidationError as e:
        for err in e.errors:
            print(mask_text(f"{args.spec}: {err}"), file=sys.stderr)
        return None


def _validate(args: argparse.Namespace) -> int:
    from airflow_connectors.catalog import transport_of
    from airflow_connectors.spec.redact import mask_text, secret_values

    spec = _load(args)
    if spec is None:
        return 1
    print("ok")
    for table, c in spec.connectors():
        transport = transport_of(c, table)
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
        line = f"{spec.name}.{table.name}.{c.name}: {transport.describe()}{fmt} tasks_max={c.tasks_max} errors={c.errors.tolerance}{' ' + ' '.join(flags) if flags else ''}"
        print(mask_text(line, secret_values(c.model_dump(mode="json"))))
    return 0


def _run(args: argparse.Namespace) -> int:
    from airflow_connectors.engine.runner import EmbeddedRunner
    from airflow_connectors.spec.redact import mask_url
    from airflow_connectors.state.signals import LEASE_TTL

    if args.debug:
        logging.getLogger("airflow_connectors").setLevel(logging.DEBUG)
    spec = _load(args)
    if spec is None:
        return 1
    settings = Settings.load(state_store_url=args.state_store_url, warehouse=args.warehouse)
    runner = EmbeddedRunner(spec, settings)
    try:
        # A connector that fails fails alone: the others run, the report lists it.
        report = runner.run(only=args.connector, max_rounds=args.max_rounds, raise_on_failure=False)
    except KeyError as e:
        print(f"run failed: {e.args[0]}", file=sys.stderr)
        return 1
    finally:
        runner.close()  # Spark is done: the summary below reads tables without it
    print(
        f"pipeline {spec.name}: {report.batches} batch(es) committed in this run; state store {runner.store.safe_url}; warehouse {mask_url(settings.warehouse)}"
    )
    for ep, rep in report.connectors.items():
        st = runner.store.status(_ref(spec.name, ep))
        total = st.total_records if st else 0
        skipped = (
            f", {rep.skipped_objects} unreadable object(s) skipped" if rep.skipped_objects else ""
        )
        waits = ""
        if rep.waiting and rep.ready_at is not None:
            until = time.strftime("%H:%M:%S", time.localtime(rep.ready_at))
            waits = (
                f"; {rep.waiting} file(s) seen but not read yet: modified within "
                f"min_file_age, readable from {until}; run again then"
            )
        print(
            f"  {ep}: {rep.status}, +{rep.records} records ({rep.batches} batches, {rep.parse_errors} parse errors{skipped}) this run, {total} in total{waits}"
        )
    _print_tables(spec, runner, args.show)
    failed = report.failed
    if failed:
        others = "; the others ran" if len(failed) < len(report.connectors) else ""
        print(
            f"run failed: {len(failed)} connector(s) of pipeline {spec.name} failed "
            f"({', '.join(failed)}){others}. `airflow-connectors stats {spec.name} TABLE "
            "CONNECTOR` shows a connector's state; --debug logs the full traces.",
            file=sys.stderr,
        )
        for ep, error in failed.items():
            print(f"  {ep}: {error}", file=sys.stderr)
    busy = report.busy
    for ep, holder in busy.items():
        # Skipped, not done: a script or scheduler running this must not take it for a
        # run that found nothing new.
        print(
            f"run incomplete: connector {spec.name}.{ep} was skipped and ingested nothing: "
            f"{holder} is planning it; run again once that run ends (the lease of a run "
            f"that died is free within {LEASE_TTL:g} s)",
            file=sys.stderr,
        )
    if failed:
        return 1
    return EXIT_BUSY if busy else 0


def _ref(pipeline: str, endpoint: str) -> Any:
    from airflow_connectors.state.store import ConnectorRef

    table, _, connector = endpoint.partition(".")
    return ConnectorRef(pipeline, table, connector)


def _print_tables(spec: Any, runner: Any, show: int) -> None:
    from airflow_connectors.engine.context import table_sink
    from airflow_connectors.engine.schema import effective_table
    from airflow_connectors.sinks._fs import describe_error
    from airflow_connectors.spec.redact import mask_url

    for declared in spec.tables:
        # Inferred (or evolved) columns: as the state store has them now.
        table = effective_table(runner.store, spec.name, declared)
        sink = table_sink(spec.name, table, runner.settings.warehouse)
        sink.state_store_url = runner.settings.state_store_url  # the Iceberg catalog's default
        for kind in ("rows", "errors"):
            path = mask_url(sink.location(kind))  # a folder or an s3:// URL
            shown = show and kind == "rows"
            try:
                # Counted from the table's metadata (Parquet footers, the Delta log,
                # Iceberg manifests): read whole only when rows are shown.
                data = sink.read(kind) if shown else None
                rows = data.num_rows if data is not None else None
                if not shown:
                    rows = sink.count_rows(kind)
            except (OSError, ValueError) as e:
                print(f"table {table.name}: {describe_error(path, e, 'read')}", file=sys.stderr)
                break
            if rows is None:
                if kind == "rows":
                    print(f"table {table.name}: no rows yet ({path})")
                continue
            label = table.name if kind == "rows" else f"{table.name}__errors"
            print(f"table {label}: {rows} rows at {path}")
            if data is not None:
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
            f"No connector named {args.connector} found for table {args.table} in pipeline {args.pipeline} (state store {store.safe_url}); known connectors: {known}. Check the names, or run the pipeline first.",
            file=sys.stderr,
        )
        return 1
    doc = _local_status(store, [ref])[ref]
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
        for e in doc["transport_errors"]:
            print(f"transport error: {e['message']}")
    return 0


def _schema(args: argparse.Namespace) -> int:
    from airflow_connectors.engine.schema import schema_view
    from airflow_connectors.state.store import StateStore

    spec = None
    if args.spec is not None:
        loaded = _load(argparse.Namespace(spec=args.spec, pipeline=args.pipeline))
        if loaded is None:
            return 1
        try:
            spec = loaded.table(args.table)
        except KeyError as e:
            print(f"{args.spec}: {e.args[0]}", file=sys.stderr)
            return 1
    settings = Settings.load(state_store_url=args.state_store_url, warehouse=args.warehouse)
    store = StateStore(settings.state_store_url)
    try:
        view = schema_view(store, args.pipeline, args.table, spec)
    finally:
        store.close()
    if view["version"] is None and spec is None:
        print(
            f"table {args.pipeline}.{args.table} has no stored schema version in the state "
            f"store {store.safe_url}: its columns are declared (give --spec FILE to show "
            "them) or not inferred yet (the first discovery infers them); check the names",
            file=sys.stderr,
        )
        return 1
    if args.json:
        print(json.dumps(view, indent=2))
        return 0
    _print_schema(view)
    return 0


def _print_schema(view: dict[str, Any]) -> None:
    how = {True: "inferred", False: "declared", None: ""}[view["inferred"]]
    mode = f"schema_evolution {view['schema_evolution']}" if view["schema_evolution"] else ""
    version = f"schema version {view['version']}" if view["version"] else "no stored version"
    extra = "; ".join(x for x in (how, mode) if x)
    print(f"table {view['pipeline']}.{view['table']}: {version}{f' ({extra})' if extra else ''}")
    if not view["columns"]:
        print("  (no columns yet: the first discovery with data infers them)")
    for c in view["columns"]:
        print(f"  {c['name']} {c['type']}{'' if c['nullable'] else ' NOT NULL'}")
    if view.get("primary_key"):
        order = f"; sequence_by {view['sequence_by']}" if view.get("sequence_by") else ""
        print(f"primary_key: {', '.join(view['primary_key'])}{order}")
    if view["schema_hints"]:
        hints = ", ".join(f"{k} {v}" for k, v in view["schema_hints"].items())
        print(f"schema_hints: {hints}")
    if view["versions"]:
        print("versions:")
    for v in view["versions"]:
        changes = [f"+{n}" for n in v["added"]] + [f"-{n}" for n in v["removed"]]
        changes += [f"~{c['name']} {c['from']}->{c['to']}" for c in v["changed"]]
        what = " ".join(changes) or f"{len(v['columns'])} column(s)"
        print(f"  {v['version']}  {v['created_at']}  {what}  ({v['origin']})")


def _pipeline(args: argparse.Namespace) -> int:
    from airflow_connectors.api_client import ApiFailed
    from airflow_connectors.engine.control import ConnectorControl, State
    from airflow_connectors.state.store import StateStore

    try:
        client = _client(args)
        if client is not None:
            if args.action != "status":
                client.call("POST", f"/v0/pipelines/{args.pipeline}/{args.action}")
            stats = client.call(
                "GET", f"/v0/pipelines/{args.pipeline}/stats?include_connector_errors=true"
            )
            return _print_pipeline(args, stats["global_metrics"]["state"].upper(), stats["inputs"])
    except ApiFailed as e:
        print(f"pipeline {args.pipeline}: {e}", file=sys.stderr)
        return 1

    settings = Settings.load(state_store_url=args.state_store_url, warehouse=args.warehouse)
    store = StateStore(settings.state_store_url)
    try:
        if args.action != "status":
            ConnectorControl(store).set_pipeline_paused(args.pipeline, args.action == "pause")
        paused = store.pipeline_paused(args.pipeline)
        refs = sorted(store.known_connectors(args.pipeline), key=lambda r: (r.table, r.connector))
        connectors = list(_local_status(store, refs).values())
    finally:
        store.close()
    state = State.PAUSED if paused else State.RUNNING
    return _print_pipeline(args, state, connectors)


def _local_status(store: Any, refs: list[Any]) -> dict[Any, dict[str, Any]]:
    """Feldera's status of each connector known to ``store``, from the control service
    the REST API uses (engine.control), over the local Airflow's DAG flags when there is
    one."""
    from airflow_connectors.engine.control import ConnectorControl, StoreSwitch

    control = _local_control(store)
    if isinstance(control.switch, StoreSwitch):
        return control.statuses(refs)
    try:
        return control.statuses(refs)
    except Exception as e:  # no usable Airflow metadata DB: the state store alone
        from airflow_connectors.settings import airflow_home

        logging.getLogger(__name__).warning(
            "could not read the DAGs' paused flags from the Airflow at %s (%s); "
            "showing the state store's flags",
            airflow_home(),
            type(e).__name__,
        )
        return ConnectorControl(store).statuses(refs)


def _local_control(store: StateStore) -> ConnectorControl:
    """The connector control service for ``--local``: over the paused flags of the DAGs
    in the Airflow of ``$AIRFLOW_HOME`` when there is one (under Airflow that flag is
    the connector's), else over the state store's own flag."""
    from airflow_connectors.engine.control import ConnectorControl
    from airflow_connectors.settings import airflow_home

    if not (airflow_home() / "airflow.cfg").is_file():
        return ConnectorControl(store)
    from airflow_connectors.airflow.dag_switch import AirflowDagSwitch

    return ConnectorControl(store, AirflowDagSwitch())


def _print_pipeline(args: argparse.Namespace, state: str, connectors: list[Any]) -> int:
    doc = {"pipeline": args.pipeline, "state": state}
    if args.json:
        print(json.dumps({**doc, "connectors": connectors}, indent=2))
        return 0
    print(f"pipeline {args.pipeline}: {doc['state']}")
    for c in connectors:
        m = c["metrics"]
        print(
            f"  {c['endpoint_name']}: {c['state']}, {m['total_records']} records, "
            f"end_of_input={m['end_of_input']}, buffered_records={m['buffered_records']}"
            + (f", lag={m['lag']}" if m.get("lag") is not None else "")
            + (f", error: {c['fatal_error']}" if c["fatal_error"] else "")
        )
    if not connectors:
        print("  (no connector has run yet)")
    return 0


def _connector(args: argparse.Namespace) -> int:
    from airflow_connectors.api_client import ApiFailed

    name = f"{args.pipeline}.{args.table}.{args.connector}"
    if (args.reset or args.set) and args.action != "offsets":
        print("--reset and --set go with the offsets action", file=sys.stderr)
        return 2
    try:
        entries = json.loads(args.set.read_text()) if args.set else None
        client = _client(args, required=True)
        doc = (
            _connector_remote(client, args, name, entries)
            if client is not None
            else _connector_local(args, entries)
        )
    except (ApiFailed, ValueError, OSError, RuntimeError) as e:
        print(f"connector {name}: {e}", file=sys.stderr)
        return 1
    if args.json or args.action in ("stats", "offsets"):
        print(json.dumps(doc, indent=2))
    else:
        print(f"connector {name}: {args.action} done" + (f" ({doc})" if doc else ""))
    return 0


def _connector_remote(client: Any, args: argparse.Namespace, name: str, entries: Any) -> Any:
    feldera = f"/v0/pipelines/{args.pipeline}/tables/{args.table}/connectors/{args.connector}"
    if args.action in ("start", "pause"):
        return client.call("POST", f"{feldera}/{args.action}")
    if args.action == "stats":
        return client.call("GET", f"{feldera}/stats")
    if args.action in ("stop", "resume"):
        return client.call("PUT", f"/connectors/{name}/{args.action}")
    if args.action == "restart":
        return client.call(
            "POST",
            f"/connectors/{name}/restart",
            params={"includeTasks": "true", "onlyFailed": "true"},
        )
    if args.reset:
        return client.call("DELETE", f"/connectors/{name}/offsets")
    if entries is not None:
        return client.call("PATCH", f"/connectors/{name}/offsets", json={"offsets": entries})
    return client.call("GET", f"/connectors/{name}/offsets")


def _connector_local(args: argparse.Namespace, entries: Any) -> Any:
    from airflow_connectors.state.store import ConnectorRef, StateStore

    ref = ConnectorRef(args.pipeline, args.table, args.connector)
    settings = Settings.load(state_store_url=args.state_store_url, warehouse=args.warehouse)
    store = StateStore(settings.state_store_url)
    try:
        if args.action in ("start", "resume", "pause", "stop"):
            return _local_transition(store, ref, args.action)
        elif args.action == "restart":
            raise RuntimeError(
                "restart reruns Airflow tasks; locally, run the connector again with "
                "`airflow-connectors run SPEC --connector TABLE.CONNECTOR`"
            )
        elif args.action == "stats":
            if store.status(ref) is None:
                raise RuntimeError(f"no state in {store.safe_url}; run the pipeline first")
            return _local_status(store, [ref])[ref]
        else:
            from airflow_connectors.engine.control import (
                check_watermark_entries,
                is_watermark_entry,
                kip875_offsets,
                offset_entry,
            )

            name = f"{ref.pipeline}.{ref.table}.{ref.connector}"
            if args.reset or entries is not None:
                if entries is not None:
                    shown = kip875_offsets([], store.watermark(ref), name)["offsets"]
                    check_watermark_entries(
                        [e for e in entries if is_watermark_entry(e)], shown[0] if shown else None
                    )
                    entries = [offset_entry(e) for e in entries if not is_watermark_entry(e)]
                store.edit_offsets(ref, entries)
            return kip875_offsets(store.offsets(ref), store.watermark(ref), name)
        return None
    finally:
        store.close()


def _local_transition(store: Any, ref: Any, action: str) -> dict[str, Any]:
    """Pause, resume, stop or start (which refuses a stopped connector: resume it)
    through the control service; says what happened to the DAG in the local Airflow
    (``$AIRFLOW_HOME``), when there is one."""
    from airflow_connectors.engine.control import ConnectorStopped, StoreSwitch
    from airflow_connectors.settings import airflow_home

    control = _local_control(store)
    dag_id = f"{ref.pipeline}.{ref.table}.{ref.connector}"
    doc: dict[str, Any] = {}
    try:
        released = getattr(control, action)(ref)
    except ConnectorStopped:
        raise
    except Exception as e:
        if isinstance(control.switch, StoreSwitch):
            raise
        # The service changed the store before the switch: only the DAG's flag (no DAG
        # parsed yet, no usable metadata database) was left as it was.
        last = (str(e).strip().splitlines() or [type(e).__name__])[-1]
        note = f"DAG {dag_id} not changed in the Airflow at {airflow_home()}: {last}"
        released = None
    else:
        if isinstance(control.switch, StoreSwitch):
            note = f"no Airflow at {airflow_home()}; the embedded state store was updated"
        else:
            note = f"DAG {dag_id} {'unpaused' if action in ('start', 'resume') else 'paused'}"
    if action == "stop":
        doc["released_batches"] = released
    return {**doc, "airflow": note}


def console() -> None:
    """The installed ``airflow-connectors`` command: :func:`main`, its output flushed,
    then out of the process with its exit status. Once deltalake was loaded (a Delta
    sink or source) the process leaves without the interpreter's teardown: deltalake 1.6
    with pyarrow 26 aborted now and then while native threads were torn down ("terminate
    called without an active exception", exit 134) after a run had committed and
    printed its summary, so a script saw a failed run that had succeeded. Spark and the
    state store are closed by then (:func:`_run`)."""
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    if "deltalake" in sys.modules:
        os._exit(status)
    sys.exit(status)


if __name__ == "__main__":
    console()
