"""Session fixtures that start real components once: Spark (local[2]), PostgreSQL
schemas, an HTTP server with Range support, an S3 server (moto), a GCS emulator
(fake-gcs-server) and a Kafka broker on 127.0.0.1."""

from __future__ import annotations

import logging
import os
import sys
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

PG_BASE = os.environ.get(
    "AIRFLOW_CONNECTORS_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def pytest_configure(config: pytest.Config) -> None:
    # py4j logs at INFO while the interpreter shuts down, after pytest closed its streams.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    # Keep Airflow settings of the developer's machine out of the tests.
    os.environ.pop("AIRFLOW__CONNECTORS__STATE_STORE_URL", None)
    os.environ.pop("AIRFLOW__CONNECTORS__WAREHOUSE", None)


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
