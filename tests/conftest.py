"""Session fixtures that start real components once: Spark (local[2]), PostgreSQL
schemas, an HTTP server with Range support, an S3 server (moto), a GCS emulator
(fake-gcs-server) and a Kafka broker on 127.0.0.1."""

from __future__ import annotations

import logging
import os
import shutil
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

PG_BASE = os.environ.get(
    "AIRFLOW_CONNECTORS_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


#: ``AIRFLOW_CONNECTORS_TEST_LANE=fast`` (``make fast``): the lane of tests that need no
#: Spark, no Airflow and no server. A test of it that starts Spark fails (see
#: :func:`_no_spark_in_the_fast_lane`): it needs the ``spark`` marker.
FAST_LANE = os.environ.get("AIRFLOW_CONNECTORS_TEST_LANE") == "fast"

# --- markers by what a test needs ------------------------------------------------------
#
# pyproject.toml registers them (pytest runs with --strict-markers). Most are applied here
# from the fixtures a test uses (``item.fixturenames`` holds every fixture it uses, also
# through other fixtures); a module that needs something without such a fixture (the CLI
# in a subprocess that starts Spark, a server of its own) says so with ``pytestmark``.

#: Fixture -> the markers of the tests that use it.
FIXTURE_NEEDS: dict[str, tuple[str, ...]] = {
    "spark": ("spark",),  # a local[2] SparkSession
    "spark_connect_server": ("spark",),  # a Spark Connect server on local Spark
    "airflow_db": ("airflow",),  # Airflow's metadata DB, for DagBag and dag.test()
    # dag.test() of connector DAGs, whose ingest tasks spark-submit on local Spark.
    "connectors_env": ("airflow", "spark"),
    # One `airflow standalone` (scheduler, API server, ...) on a PostgreSQL metadata DB,
    # its batches on the session's Spark Connect server.
    "e2e": ("airflow", "spark", "postgres"),
    # The scale-out deployment of tests/cluster/conftest.py.
    "deployment": ("airflow", "spark", "postgres", "s3", "redis"),
    "pg_schema_factory": ("postgres",),
    "pg_database": ("postgres",),
    "pg_logical": ("postgres",),  # a private cluster of PostgreSQL's binaries
    "s3_server": ("s3",),  # moto
    "gcs_server": ("gcs",),  # fake-gcs-server
    "azurite": ("azure",),  # Azurite (npm)
    "kafka_broker": ("kafka",),
    "kafka_connect": ("kafka",),
    # Fixtures of test modules that start a server of their own.
    "browser": ("browser",),  # headless Chromium (tests/airflow/test_connectors_page.py)
    "auth_s3": ("s3",),  # moto checking signatures
    "token_server": ("spark",),  # a Spark Connect server that wants a token
    "killable_spark_connect_server": ("spark",),
}

#: Fixtures that take long without needing anything of the above: their tests are ``slow``.
SLOW_FIXTURES = frozenset(
    {
        "site",  # tests/test_docs.py: the documentation site, built with Sphinx
    }
)

#: A parameter (of a fixture or of ``parametrize``) of this value runs the test against
#: PostgreSQL (``store_url``, ``new_store``, a catalog or a sink kind).
POSTGRES_PARAM = "postgres"

#: Tests of the conformance kits (airflow_connectors/testing/) that start an ingest job
#: (spark-submit) in a subprocess without a fixture that says so.
KIT_TESTS_STARTING_SPARK = frozenset({"test_polling_reader_sees_whole_batches_only"})


def added_markers(item: pytest.Item) -> set[str]:
    """The markers :func:`pytest_collection_modifyitems` adds to ``item``: what its
    fixtures and parameters need, ``slow`` for :data:`SLOW_FIXTURES`."""
    needs = {
        need for name in getattr(item, "fixturenames", ()) for need in FIXTURE_NEEDS.get(name, ())
    }
    callspec = getattr(item, "callspec", None)
    if callspec is not None and POSTGRES_PARAM in [
        v for v in callspec.params.values() if isinstance(v, str)
    ]:
        needs.add("postgres")
    if SLOW_FIXTURES.intersection(getattr(item, "fixturenames", ())):
        needs.add("slow")
    if getattr(item, "originalname", item.name) in KIT_TESTS_STARTING_SPARK:
        needs.add("spark")
    return needs


@pytest.hookimpl(tryfirst=True)  # before -m selects by markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test by what it needs (:func:`added_markers`)."""
    for item in items:
        present = {m.name for m in item.iter_markers()}
        for need in sorted(added_markers(item) - present):
            item.add_marker(need)


#: What undoes the fast lane's guard at the end of the session.
_FAST_LANE_UNDO: list[Callable[[], None]] = []


def _fake_spark_home(root: Path) -> Path:
    """pyspark's Spark home (its jars, its Python) whose ``bin/`` and ``sbin/`` scripts
    refuse to start: pyspark's sessions, the ``.venv/bin/spark-submit`` of ingest jobs,
    Spark Connect servers and standalone clusters all start Spark through them, in this
    process or in a subprocess (which inherits ``SPARK_HOME``)."""
    import importlib.util

    spec = importlib.util.find_spec("pyspark")
    assert spec is not None and spec.submodule_search_locations
    real = Path(next(iter(spec.submodule_search_locations)))
    script = (
        "#!/bin/sh\n"
        'echo "fast lane: this test started Spark ($0 $*); mark it spark'
        ' (tests/conftest.py FIXTURE_NEEDS or pytestmark)" >&2\n'
        "exit 97\n"
    )
    for entry in real.iterdir():
        if entry.name in ("bin", "sbin"):
            (root / entry.name).mkdir(parents=True, exist_ok=True)
            for tool in entry.iterdir():
                fake = root / entry.name / tool.name
                fake.write_text(script)
                fake.chmod(0o755)
        else:
            (root / entry.name).symlink_to(entry)
    return root


def pytest_configure(config: pytest.Config) -> None:
    # py4j logs at INFO while the interpreter shuts down, after pytest closed its streams.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    # Keep Airflow settings of the developer's machine out of the tests.
    os.environ.pop("AIRFLOW__CONNECTORS__STATE_STORE_URL", None)
    os.environ.pop("AIRFLOW__CONNECTORS__WAREHOUSE", None)
    if FAST_LANE:
        _no_spark_in_the_fast_lane()


def _no_spark_in_the_fast_lane() -> None:
    """In the fast lane a test (or a fixture) that creates a SparkSession fails naming
    the marker it needs; a Spark started in a subprocess (an ingest job, the CLI's run)
    fails through the fake ``SPARK_HOME`` the subprocess inherits."""
    import tempfile

    import pyspark.sql

    def refuse(*args: Any, **kwargs: Any) -> Any:
        pytest.fail(
            "a test of the fast lane (AIRFLOW_CONNECTORS_TEST_LANE=fast) creates a "
            "SparkSession: mark it `spark` (tests/conftest.py FIXTURE_NEEDS or pytestmark)",
            pytrace=False,
        )

    home = Path(tempfile.mkdtemp(prefix="ac-fast-lane-spark-"))
    _FAST_LANE_UNDO.append(lambda: shutil.rmtree(home, ignore_errors=True))
    patch = pytest.MonkeyPatch()
    _FAST_LANE_UNDO.append(patch.undo)
    patch.setenv("SPARK_HOME", str(_fake_spark_home(home)))
    patch.setattr(pyspark.sql.SparkSession.Builder, "getOrCreate", refuse)


def pytest_unconfigure(config: pytest.Config) -> None:
    while _FAST_LANE_UNDO:
        _FAST_LANE_UNDO.pop()()


@pytest.fixture(autouse=True)
def _classic_pyspark_after_each_test() -> Iterator[None]:
    """pyspark marks a process that opened a Spark Connect session through
    ``pyspark.sql.SparkSession.builder.remote()`` as a Spark Connect client for good
    (``SPARK_CONNECT_MODE_ENABLED``): later classic sessions, and the spark-submits that
    inherit the variable, refuse to start. No test leaves that mark to the next."""
    before = os.environ.get("SPARK_CONNECT_MODE_ENABLED")
    yield
    if before is None:
        os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from airflow_connectors.engine.spark import spark_session
    from airflow_connectors.settings import Settings

    session = spark_session(
        Settings(
            state_store_url="sqlite://",
            warehouse="/tmp",
            spark_master="local[2]",
            spark_driver_memory="2g",
        ),
        "airflow-connectors tests",
    )
    yield session
    session.stop()


@pytest.fixture(scope="session")
def pg_schema_factory() -> Iterator[Any]:
    import sqlalchemy as sa

    engine = sa.create_engine(PG_BASE)
    try:
        with engine.connect():
            pass
    except Exception as e:  # pragma: no cover - the machine's PostgreSQL is required
        pytest.fail(
            f"PostgreSQL at {PG_BASE} is not reachable ({e}); start it with "
            "`bash scripts/services.sh up postgres` or set AIRFLOW_CONNECTORS_TEST_PG"
        )
    created: list[str] = []

    def make() -> str:
        schema = f"ac_test_{uuid.uuid4().hex[:10]}"
        with engine.begin() as conn:
            conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
        created.append(schema)
        return f"{PG_BASE}?options=-csearch_path%3D{schema}"

    yield make
    with engine.begin() as conn:
        for schema in created:
            conn.execute(sa.text(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))
    engine.dispose()


@pytest.fixture(scope="session")
def pg_database() -> Iterator[Any]:
    """A factory of fresh PostgreSQL databases (dropped at the end of the session)."""
    import sqlalchemy as sa
    from sqlalchemy.engine import make_url

    admin = sa.create_engine(PG_BASE, isolation_level="AUTOCOMMIT")
    created: list[str] = []

    def make() -> str:
        name = f"ac_airflow_{uuid.uuid4().hex[:10]}"
        with admin.connect() as conn:
            conn.execute(sa.text(f"CREATE DATABASE {name}"))
        created.append(name)
        return make_url(PG_BASE).set(database=name).render_as_string(hide_password=False)

    yield make
    with admin.connect() as conn:
        for name in created:
            conn.execute(sa.text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
    admin.dispose()


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'state.db'}"
    return str(request.getfixturevalue("pg_schema_factory")())


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'state.db'}"


class _Files(BaseHTTPRequestHandler):
    files: ClassVar[dict[str, bytes]] = {}
    requests: ClassVar[list[dict[str, str]]] = []

    def do_GET(self) -> None:
        body = self.files.get(self.path)
        self.requests.append({"path": self.path, "range": self.headers.get("Range", "")})
        if body is None:
            self.send_response(404)
            self.end_headers()
            return
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes="):
            start = int(rng[6:].split("-")[0])
            if start >= len(body):
                self.send_response(416)
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
            part = body[start:]
        else:
            self.send_response(200)
            part = body
        self.send_header("Content-Length", str(len(part)))
        self.end_headers()
        self.wfile.write(part)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="session")
def http_server() -> Iterator[Any]:
    """``server.files['/x.json'] = b'...'``; ``server.url('/x.json')``."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Files)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()

    class Handle:
        files = _Files.files
        requests = _Files.requests

        @staticmethod
        def url(path: str) -> str:
            return f"http://127.0.0.1:{server.server_address[1]}{path}"

    yield Handle
    server.shutdown()


@pytest.fixture
def warehouse(tmp_path: Path) -> str:
    return str(tmp_path / "warehouse")


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """moto's S3 server on 127.0.0.1 for the whole session (see
    :mod:`airflow_connectors.testing.s3server`); tests create buckets of their own."""
    from airflow_connectors.testing.s3server import S3Server

    with S3Server(log=tmp_path_factory.mktemp("s3") / "moto.log") as server:
        yield server


@pytest.fixture
def s3_bucket(s3_server: Any) -> str:
    """A fresh, empty bucket on the session's S3 server."""
    return s3_server.create_bucket(f"t-{uuid.uuid4().hex[:12]}")


@pytest.fixture(scope="session")
def azurite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Azurite's Blob service on 127.0.0.1 for the whole session, in memory (see
    :mod:`airflow_connectors.testing.azurite`: npm installs it outside the repository on
    first use); tests create containers of their own."""
    from airflow_connectors.testing.azurite import Azurite

    with Azurite(log=tmp_path_factory.mktemp("azurite") / "azurite.log") as server:
        yield server


@pytest.fixture
def azure_container(azurite: Any) -> str:
    """A fresh, empty container on the session's Azurite."""
    return azurite.create_container(f"t-{uuid.uuid4().hex[:12]}")


@pytest.fixture(scope="session")
def gcs_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """fake-gcs-server on 127.0.0.1 for the whole session (in memory; see
    :mod:`airflow_connectors.testing.gcs`); tests create buckets of their own."""
    from airflow_connectors.testing.gcs import GcsServer

    with GcsServer(log=tmp_path_factory.mktemp("gcs") / "fake-gcs-server.log") as server:
        yield server


@pytest.fixture
def gcs_bucket(gcs_server: Any) -> str:
    """A fresh, empty bucket on the session's GCS emulator."""
    return str(gcs_server.create_bucket(f"t-{uuid.uuid4().hex[:12]}"))


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real Kafka broker (KRaft, from Maven Central's jars; see
    :mod:`airflow_connectors.testing.kafka`) for the whole session (``.bootstrap_servers``,
    ``.admin()``), or the user's when ``AIRFLOW_CONNECTORS_TEST_KAFKA`` names its bootstrap
    servers. Tests make topics of their own (unique names; topics are not created
    automatically) and must not stop it."""
    from airflow_connectors.testing.kafka import KafkaBroker, KafkaEndpoint

    external = os.environ.get("AIRFLOW_CONNECTORS_TEST_KAFKA")
    if external:
        endpoint = KafkaEndpoint(external)
        try:
            endpoint.check(timeout=15)
        except RuntimeError as e:
            pytest.fail(f"{e} (AIRFLOW_CONNECTORS_TEST_KAFKA={external})")
        yield endpoint
        return
    with KafkaBroker(tmp_path_factory.mktemp("kafka")) as broker:
        yield broker


# --- issue 25, postgres_cdc_input: a private cluster with wal_level=logical ----------------


@pytest.fixture(scope="session")
def pg_logical() -> Iterator[Any]:
    """A private PostgreSQL cluster with ``wal_level=logical`` on a free port of 127.0.0.1
    for the whole session (see :mod:`airflow_connectors.testing.pgcluster`): ``.port``,
    ``.url(db='postgres')``, ``.dsn``, ``.connect(db)``, ``.create_database(name)``. The
    server on 5432 is not touched. Tests make databases, tables, publications and slots of
    their own (unique names) and drop the slots they made (a slot holds WAL back)."""
    from airflow_connectors.testing.pgcluster import PgCluster

    try:
        cluster = PgCluster().start()
    except RuntimeError as e:
        pytest.fail(str(e))
    yield cluster
    cluster.stop()


# --- issue 25, Debezium: a Kafka Connect worker (standalone) on the session's broker -------


@pytest.fixture(scope="session")
def kafka_connect(kafka_broker: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real Kafka Connect worker in standalone mode (connect-runtime, the Debezium
    PostgreSQL connector and Kafka's FileStreamSource/Sink from Maven Central's jars; see
    :mod:`airflow_connectors.testing.kafka_connect`) writing to the session's
    ``kafka_broker``, value converter JsonConverter with schemas: ``.create_connector``,
    ``.wait_snapshot``, ``.delete_connector``. Started on first use; tests make connectors
    of their own (unique names, topic prefixes and slots) and delete them."""
    from airflow_connectors.testing.kafka_connect import ConnectError, ConnectWorker
    from airflow_connectors.testing.maven import MavenError

    worker = ConnectWorker(kafka_broker.bootstrap_servers, tmp_path_factory.mktemp("connect"))
    try:
        worker.start()
    except (ConnectError, MavenError) as e:
        pytest.fail(str(e))
    yield worker
    worker.stop()


# --- issue 26, Spark Connect: a warm server of local Spark ---------------------------------


@pytest.fixture(scope="session")
def spark_connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """pyspark's Spark Connect server on ``local[2]`` and 127.0.0.1 for the whole session
    (see :mod:`airflow_connectors.testing.spark_connect`): ``.url``
    (``sc://127.0.0.1:<port>``), ``.port``, ``.log_path``. Started on first use. A test
    that kills it (``.kill()``) starts it again (``.start()``, same port) before it ends;
    client sessions of the killed server are gone (``engine.connect.forget_session``)."""
    from airflow_connectors.testing.spark_connect import SparkConnectServer

    with SparkConnectServer(tmp_path_factory.mktemp("spark-connect")) as server:
        yield server
