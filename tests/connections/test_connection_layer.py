"""The connection layer (:mod:`airflow_connectors.connections`): Airflow's JSON and URI
forms of ``AIRFLOW_CONN_<ID>`` read alike, the installed resolver asked after the
environment, every problem one :class:`ConnectionProblem` that names the connection and
its variable and holds no secret, and one :class:`AwsSettings` rendered for boto3,
pyarrow, delta-rs and pyiceberg, each used against an S3 server (moto) that checks
credentials, so a setting that does not reach the library fails the test."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import boto3
import pyarrow as pa
import pytest

from airflow_connectors.connections import aws, http, postgres
from airflow_connectors.connections.base import (
    AirflowConnection,
    ConnectionProblem,
    lookup,
    parse,
    set_connection_resolver,
)
from airflow_connectors.testing.s3server import REGION, S3Server

SECRET = "pw-Secret/with:odd@chars-0042"
TOKEN = "tok-Secret-session-0042"


@pytest.fixture(autouse=True)
def _no_resolver() -> Iterator[None]:
    set_connection_resolver(None)
    yield
    set_connection_resolver(None)


# --- parsing ------------------------------------------------------------------------------


def test_json_and_uri_forms_read_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    extra = {"region_name": "eu-west-3", "endpoint_url": "http://127.0.0.1:9000"}
    as_json = {
        "conn_type": "aws",
        "host": "db.example.com",
        "port": 6543,
        "schema": "sales",
        "login": "AKIA1",
        "password": SECRET,
        "extra": json.dumps(extra),
    }
    as_uri = (
        f"aws://AKIA1:{quote(SECRET, safe='')}@db.example.com:6543/sales?"
        f"region_name=eu-west-3&endpoint_url={quote(extra['endpoint_url'], safe='')}"
    )
    as_extra_uri = (
        f"aws://AKIA1:{quote(SECRET, safe='')}@db.example.com:6543/sales?"
        f"__extra__={quote(json.dumps(extra), safe='')}"
    )
    read = []
    for value in (json.dumps(as_json), as_uri, as_extra_uri):
        monkeypatch.setenv("AIRFLOW_CONN_FORMS", value)
        read.append(lookup("forms"))
    expected = AirflowConnection(
        conn_id="forms",
        conn_type="aws",
        host="db.example.com",
        login="AKIA1",
        password=SECRET,
        schema="sales",
        port=6543,
        extra=extra,
    )
    assert read == [expected] * 3
    assert SECRET not in repr(read[0])
    assert parse("pg", "postgresql://u@h/db").conn_type == "postgres"  # as Airflow names it
    # The JSON form round-trips through what AIRFLOW_CONN_<ID> may hold.
    assert parse("forms", json.dumps(expected.to_json())) == expected


def test_the_environment_first_then_the_installed_resolver(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[str] = []

    def resolver(conn_id: str) -> dict[str, Any] | None:
        asked.append(conn_id)
        return {"conn_type": "http", "host": "from-airflow"} if conn_id == "known" else None

    set_connection_resolver(resolver)
    monkeypatch.delenv("AIRFLOW_CONN_KNOWN", raising=False)
    assert lookup("known").host == "from-airflow"
    monkeypatch.setenv("AIRFLOW_CONN_KNOWN", "http://from-env")
    assert lookup("known").host == "from-env"
    assert asked == ["known"]  # the variable wins without asking Airflow
    with pytest.raises(ConnectionProblem, match="Airflow does not know it either"):
        lookup("unknown")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, "names no connection (AIRFLOW_CONN_BROKEN_1 is not set, and Airflow was not asked)"),
        (f'{{"conn_type": "aws", "password": "{SECRET}", oops}}', "is not valid JSON (line 1"),
        (f"login={SECRET}", "is neither JSON nor a URI"),
        (f'{{"conn_type": "aws", "password": "{SECRET}", "extra": "[1, 2]"}}', "is not an object"),
        (f'{{"password": "{SECRET}", "extra": "{{region_name: x}}"}}', "text that is not JSON"),
        (f"http://u:{quote(SECRET, safe='')}@h:notaport/x", "not a valid URI"),
        (f'{{"password": "{SECRET}", "port": "eighty"}}', "the port of connection"),
    ],
    ids=[
        "missing",
        "bad-json",
        "no-uri",
        "extra-list",
        "extra-text",
        "bad-port",
        "port-word",
    ],
)
def test_every_problem_is_one_error_naming_the_variable_without_secrets(
    value: str | None, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if value is None:
        monkeypatch.delenv("AIRFLOW_CONN_BROKEN_1", raising=False)
    else:
        monkeypatch.setenv("AIRFLOW_CONN_BROKEN_1", value)
    with pytest.raises(ConnectionProblem) as raised:
        lookup("broken_1", who="s3_input", field="aws_conn_id", kind="Amazon Web Services")
    message = str(raised.value)
    assert isinstance(raised.value, OSError) and isinstance(raised.value, LookupError)
    assert message.startswith("s3_input: ") and expected in message, message
    assert "'broken_1'" in message and "AIRFLOW_CONN_BROKEN_1" in message
    assert "expected" in message or "create" in message  # what was expected / what to do
    assert SECRET not in message and quote(SECRET, safe="") not in message
    assert "\n" not in message


def test_a_missing_connection_says_which_kind_to_create() -> None:
    with pytest.raises(ConnectionProblem) as raised:
        postgres.connection_uri("nowhere_pg", "postgres sink")
    assert str(raised.value) == (
        "postgres sink: postgres_conn_id 'nowhere_pg' names no connection "
        "(AIRFLOW_CONN_NOWHERE_PG is not set, and Airflow was not asked); create a Postgres "
        "connection 'nowhere_pg' in Airflow, set AIRFLOW_CONN_NOWHERE_PG (JSON or URI form), "
        "or give uri"
    )


def test_secrets_of_a_connection() -> None:
    conn = parse(
        "s",
        {
            "password": SECRET,
            "extra": {
                "aws_session_token": TOKEN,
                "region_name": "eu-west-1",
                "headers": {"X-API-Key": "k-header-0042", "Accept": "application/json"},
            },
        },
    )
    assert conn.secrets() == {SECRET, TOKEN, "k-header-0042"}


# --- per kind -----------------------------------------------------------------------------


def test_postgres_and_http_connections(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_PG_URI",
        f"postgres://app:{quote(SECRET, safe='')}@db:5433/sales?sslmode=require&x=1",
    )
    monkeypatch.setenv(
        "AIRFLOW_CONN_PG_JSON",
        json.dumps(
            {"conn_type": "postgres", "host": "db", "port": 5433, "login": "app",
             "password": SECRET, "schema": "sales", "extra": {"sslmode": "require", "x": 1}}
        ),
    )  # fmt: skip
    uri = f"postgresql://app:{quote(SECRET, safe='')}@db:5433/sales?sslmode=require"
    assert postgres.connection_uri("pg_uri", "t") == postgres.connection_uri("pg_json", "t") == uri
    assert postgres.redacted(uri) == "postgresql://db:5433/sales"
    monkeypatch.setenv(
        "AIRFLOW_CONN_API",
        f"http://u:{quote(SECRET, safe='')}@api.example.com:8443/https?X-Token=t-42-x",
    )
    api = http.http_connection("api")  # the schema (the URI's path) is the scheme
    assert (api.base_url, api.auth, dict(api.headers)) == (
        "https://api.example.com:8443",
        ("u", SECRET),
        {"X-Token": "t-42-x"},
    )
    assert api.secrets() == {SECRET, "t-42-x"}


class _Config:
    """A config with the AWS fields (what AwsConfigFields declares)."""

    def __init__(self, **fields: Any) -> None:
        self.region = fields.get("region")
        self.endpoint_url = fields.get("endpoint_url")
        self.aws_access_key_id = fields.get("aws_access_key_id")
        self.aws_secret_access_key = fields.get("aws_secret_access_key")
        self.aws_conn_id = fields.get("aws_conn_id")
        self.no_sign_request = fields.get("no_sign_request", False)


def test_aws_settings_from_config_connection_and_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for var in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_REGION", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv(
        "AIRFLOW_CONN_LAKE",
        json.dumps(
            {"conn_type": "aws", "login": "AKIA-conn", "password": SECRET,
             "extra": {"aws_session_token": TOKEN, "region_name": "eu-west-1",
                       "service_config": {"s3": {"endpoint_url": "http://s3.local:9000"}}}}
        ),
    )  # fmt: skip
    # The connection's, with the config's region taking precedence.
    via_conn = aws.AwsSettings.resolve(_Config(aws_conn_id="lake", region="eu-north-1"))
    assert via_conn == aws.AwsSettings(
        "AKIA-conn", SECRET, TOKEN, "eu-north-1", "http://s3.local:9000"
    )
    assert SECRET not in repr(via_conn) and TOKEN not in repr(via_conn)
    assert via_conn.secrets() == {SECRET, TOKEN}
    # Explicit keys; the environment fills only what is unset, keys never mixed.
    monkeypatch.setenv("AWS_REGION", "ap-south-1")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "env-token")
    explicit = aws.AwsSettings.resolve(_Config(aws_access_key_id="K", aws_secret_access_key="S"))
    assert explicit.with_environment() == aws.AwsSettings("K", "S", None, "ap-south-1")
    anonymous = aws.AwsSettings.resolve(_Config(no_sign_request=True)).with_environment()
    assert anonymous.anonymous and anonymous.access_key is None
    assert anonymous.storage_options()["AWS_SKIP_SIGNATURE"] == "true"
    assert anonymous.iceberg_properties()["s3.anonymous"] == "true"
    with pytest.raises(ConnectionProblem, match=r"^delta_table_input: aws_conn_id 'nope' names"):
        aws.AwsSettings.resolve(_Config(aws_conn_id="nope"), who="delta_table_input")


def test_aws_config_fields_reject_two_ways_of_authenticating() -> None:
    from pydantic import ValidationError

    from airflow_connectors.spec.config import StrictConfig

    class Config(aws.AwsConfigFields, StrictConfig):
        uri: str

    ok = Config(uri="s3://b/t", aws_conn_id="lake")
    assert ok.aws_settings is not None
    for bad, words in (
        ({"aws_access_key_id": "k"}, "together"),
        ({"aws_conn_id": "c", "no_sign_request": True}, "one way of authenticating"),
    ):
        with pytest.raises(ValidationError, match=words):
            Config(uri="s3://b/t", **bad)


# --- AwsSettings used by each library against a server that checks credentials ------------


@pytest.fixture(scope="module")
def auth_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[S3Server, dict[str, str]]]:
    """moto's S3 server checking signatures, with an IAM user that may do anything."""
    log = tmp_path_factory.mktemp("auth-s3") / "moto.log"
    old = os.environ.get("INITIAL_NO_AUTH_ACTION_COUNT")
    # Signatures are checked after the start-up probe and the three IAM calls below.
    os.environ["INITIAL_NO_AUTH_ACTION_COUNT"] = "4"
    try:
        server = S3Server(log=log).start()
    finally:
        if old is None:
            os.environ.pop("INITIAL_NO_AUTH_ACTION_COUNT", None)
        else:
            os.environ["INITIAL_NO_AUTH_ACTION_COUNT"] = old
    try:
        iam = boto3.client(
            "iam",
            endpoint_url=server.endpoint_url,
            region_name=REGION,
            aws_access_key_id="bootstrap",
            aws_secret_access_key="bootstrap",
        )
        iam.create_user(UserName="admin")
        key = iam.create_access_key(UserName="admin")["AccessKey"]
        policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": ["*"], "Resource": "*"}]}  # fmt: skip
        iam.put_user_policy(UserName="admin", PolicyName="p", PolicyDocument=json.dumps(policy))
        yield server, {"login": key["AccessKeyId"], "password": key["SecretAccessKey"]}
    finally:
        server.stop()


@pytest.fixture
def lake(
    auth_s3: tuple[S3Server, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> tuple[aws.AwsSettings, str]:
    """Settings resolved from an ``aws_conn_id`` whose connection (only) names the
    server, its region and the admin's keys; a fresh bucket made with them."""
    server, keys = auth_s3
    for var in (
        "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ALLOW_HTTP", "AWS_PROFILE",
    ):  # fmt: skip
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    extra = {"endpoint_url": server.endpoint_url, "region_name": REGION}
    monkeypatch.setenv(
        "AIRFLOW_CONN_LAKE_TEST", json.dumps({"conn_type": "aws", **keys, "extra": extra})
    )
    settings = aws.AwsSettings.resolve(_Config(aws_conn_id="lake_test"), who="test")
    assert (settings.endpoint_url, settings.region) == (server.endpoint_url, REGION)
    bucket = f"lake-{os.urandom(4).hex()}"
    boto3.session.Session().client("s3", **settings.client_kwargs()).create_bucket(Bucket=bucket)
    return settings, bucket


def _wrong_secret(settings: aws.AwsSettings) -> aws.AwsSettings:
    import dataclasses

    return dataclasses.replace(settings, secret_key="not-the-secret-0042")


def test_boto3_with_the_settings(lake: tuple[aws.AwsSettings, str]) -> None:
    from botocore.exceptions import ClientError

    settings, bucket = lake
    client = boto3.session.Session().client(
        "s3", **settings.client_kwargs(retries={"total_max_attempts": 1})
    )
    client.put_object(Bucket=bucket, Key="a.txt", Body=b"hello")
    assert client.get_object(Bucket=bucket, Key="a.txt")["Body"].read() == b"hello"
    wrong = boto3.session.Session().client("s3", **_wrong_secret(settings).client_kwargs())
    with pytest.raises(ClientError, match="SignatureDoesNotMatch"):
        wrong.get_object(Bucket=bucket, Key="a.txt")


def test_pyarrow_with_the_settings(lake: tuple[aws.AwsSettings, str]) -> None:
    import pyarrow.parquet as pq
    from pyarrow import fs as pafs

    settings, bucket = lake
    fs = settings.pyarrow_filesystem()
    assert fs is settings.pyarrow_filesystem()  # one per distinct settings
    table = pa.table({"id": [1, 2, 3]})
    pq.write_table(table, f"{bucket}/t/part-0.parquet", filesystem=fs)
    assert pq.read_table(f"{bucket}/t", filesystem=fs).equals(table)
    wrong = pafs.S3FileSystem(**_wrong_secret(settings).pyarrow_kwargs())
    with pytest.raises(OSError, match=r"ACCESS_DENIED|SIGNATURE_DOES_NOT_MATCH"):
        wrong.get_file_info(f"{bucket}/t/part-0.parquet")


def test_delta_rs_with_the_settings(lake: tuple[aws.AwsSettings, str]) -> None:
    from deltalake import DeltaTable, write_deltalake

    settings, bucket = lake
    uri = f"s3://{bucket}/delta/events"
    options = {**settings.storage_options(), "AWS_S3_ALLOW_UNSAFE_RENAME": "true"}
    assert options["AWS_ALLOW_HTTP"] == "true"  # an http:// endpoint
    table = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": ["a", "b", "c"]})
    write_deltalake(uri, table, storage_options=options)
    write_deltalake(uri, table.slice(0, 1), mode="append", storage_options=options)
    read = DeltaTable(uri, storage_options=settings.storage_options())
    assert read.version() == 1
    assert sorted(read.to_pyarrow_table()["id"].to_pylist()) == [1, 1, 2, 3]
    with pytest.raises(Exception, match=r"(?i)signature|forbidden|403|access"):
        DeltaTable(uri, storage_options=_wrong_secret(settings).storage_options())


def test_pyiceberg_file_io_with_the_settings(lake: tuple[aws.AwsSettings, str]) -> None:
    from pyiceberg.io.pyarrow import PyArrowFileIO

    settings, bucket = lake
    io = PyArrowFileIO(settings.iceberg_properties())
    with io.new_output(f"s3://{bucket}/iceberg/blob.bin").create() as out:
        out.write(b"iceberg bytes")
    with io.new_input(f"s3://{bucket}/iceberg/blob.bin").open() as f:
        assert f.read() == b"iceberg bytes"
    wrong = PyArrowFileIO(_wrong_secret(settings).iceberg_properties())
    with pytest.raises(OSError):
        wrong.new_input(f"s3://{bucket}/iceberg/blob.bin").open().read()
