"""``execution: spark_submit | spark_connect`` (issue 26): per connector in the spec, with
the ``[connectors] execution`` default, and the Spark Connect settings beside it. A bad
value is one line naming the field and the accepted values."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_connectors.catalog import parse_pipeline, validate_pipeline
from airflow_connectors.settings import Settings, SettingsError

OPTIONS = (
    "AIRFLOW__CONNECTORS__EXECUTION",
    "AIRFLOW__CONNECTORS__SPARK_CONNECT_CONN_ID",
    "AIRFLOW__CONNECTORS__SPARK_CONNECT_URL",
    "AIRFLOW__CONNECTORS__SPARK_CONNECT_SESSION",
)


@pytest.fixture
def options(tmp_path: Any) -> Iterator[dict[str, str]]:
    """The Spark Connect options of ``[connectors]``, set by the test, restored after;
    an empty AIRFLOW_HOME so no airflow.cfg of the machine answers."""
    keys = (*OPTIONS, "AIRFLOW_HOME", "AIRFLOW_CONFIG")
    old = {k: os.environ.get(k) for k in keys}
    for k in keys:
        os.environ.pop(k, None)
    os.environ["AIRFLOW_HOME"] = str(tmp_path)
    env: dict[str, str] = {}
    yield env
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def pipeline(**connector: Any) -> dict[str, Any]:
    return {
        "pipeline": "p",
        "tables": {
            "t": {
                "columns": {"id": "BIGINT"},
                "connectors": [
                    {
                        "name": "c",
                        "transport": {"name": "file_input", "config": {"path": "/data/x.csv"}},
                        "format": {"name": "csv"},
                        **connector,
                    }
                ],
            }
        },
    }


def test_execution_defaults_to_the_setting_and_takes_either_value() -> None:
    ((_, default),) = parse_pipeline(pipeline()).connectors()
    assert default.execution is None
    for value in ("spark_submit", "spark_connect"):
        ((_, c),) = parse_pipeline(pipeline(execution=value)).connectors()
        assert c.execution == value


def test_a_bad_execution_is_one_error_naming_the_field_and_the_values() -> None:
    found = [(e.path, e.message) for e in validate_pipeline(pipeline(execution="spark-connect"))]
    assert found == [
        (
            "tables.t.connectors[0].execution",
            "input should be 'spark_submit' or 'spark_connect' (got 'spark-connect')",
        )
    ]


def test_settings_default_to_spark_submit(options: dict[str, str]) -> None:
    s = Settings.load()
    assert (s.execution, s.spark_connect_conn_id, s.spark_connect_url) == (
        "spark_submit",
        "connectors_spark_connect",
        None,
    )
    assert s.execution_of(None) == "spark_submit"
    assert s.execution_of("spark_connect") == "spark_connect"


def test_settings_read_the_spark_connect_options(options: dict[str, str]) -> None:
    os.environ["AIRFLOW__CONNECTORS__EXECUTION"] = "Spark_Connect"
    os.environ["AIRFLOW__CONNECTORS__SPARK_CONNECT_CONN_ID"] = "my_server"
    os.environ["AIRFLOW__CONNECTORS__SPARK_CONNECT_URL"] = "sc://127.0.0.1:15002"
    s = Settings.load()
    assert (s.execution, s.spark_connect_conn_id, s.spark_connect_url) == (
        "spark_connect",
        "my_server",
        "sc://127.0.0.1:15002",
    )
    # A connector's own execution wins over the default.
    assert s.execution_of("spark_submit") == "spark_submit"
    assert s.execution_of(None) == "spark_connect"


def test_a_bad_execution_setting_is_one_line(options: dict[str, str]) -> None:
    os.environ["AIRFLOW__CONNECTORS__EXECUTION"] = "yarn"
    with pytest.raises(SettingsError) as e:
        Settings.load()
    assert str(e.value) == (
        "[connectors] execution (AIRFLOW__CONNECTORS__EXECUTION) is 'yarn'; expected one of "
        "spark_submit, spark_connect"
    )


def test_a_url_that_is_not_spark_connect_is_refused_without_quoting_it(
    options: dict[str, str],
) -> None:
    os.environ["AIRFLOW__CONNECTORS__SPARK_CONNECT_URL"] = "http://127.0.0.1:15002/;token=T0k3n"
    with pytest.raises(SettingsError) as e:
        Settings.load()
    message = str(e.value)
    assert "\n" not in message and "T0k3n" not in message
    assert message.startswith(
        "[connectors] spark_connect_url (AIRFLOW__CONNECTORS__SPARK_CONNECT_URL) does not "
        "start with sc://"
    )


def test_spark_connect_sessions_are_shared_unless_set_per_task(options: dict[str, str]) -> None:
    from airflow_connectors.engine.connect import _with_session_id, shared_session_id

    s = Settings.load()
    assert s.spark_connect_session == "shared"
    # One id per deployment (state store, warehouse) and package version: every process
    # of a deployment attaches to the same server session; another deployment does not.
    assert shared_session_id(s) == shared_session_id(Settings.load())
    other = Settings.load(warehouse=str(os.path.join(os.environ["AIRFLOW_HOME"], "other")))
    assert shared_session_id(other) != shared_session_id(s)
    assert _with_session_id("sc://h:1", "S") == "sc://h:1/;session_id=S"
    assert _with_session_id("sc://h:1/;token=T", "S") == "sc://h:1/;token=T;session_id=S"
    os.environ["AIRFLOW__CONNECTORS__SPARK_CONNECT_SESSION"] = "Per_Task"
    assert Settings.load().spark_connect_session == "per_task"
    os.environ["AIRFLOW__CONNECTORS__SPARK_CONNECT_SESSION"] = "private"
    with pytest.raises(SettingsError) as e:
        Settings.load()
    assert str(e.value) == (
        "[connectors] spark_connect_session (AIRFLOW__CONNECTORS__SPARK_CONNECT_SESSION) is "
        "'private'; expected one of shared, per_task"
    )


class _RacingSession:
    """A Spark Connect session whose server answers ``addArtifacts`` as it does when
    another process of the shared session adds the same zip at the same moment (the
    server's file move meets the other write): failure injection a single real client
    cannot provoke on demand."""

    def __init__(self, answers: list[str | None]) -> None:
        self.answers = answers
        self.calls = 0

    def addArtifacts(self, path: str, pyfile: bool = False) -> None:
        answer = self.answers[min(self.calls, len(self.answers) - 1)]
        self.calls += 1
        if answer is not None:
            raise RuntimeError(answer.format(name=os.path.basename(path)))


@pytest.mark.slow
def test_the_package_is_added_again_when_another_process_adds_it_at_once() -> None:
    # Issue 26's shared sessions: two ingest tasks attach to one server session and add
    # the same zip; the one whose move met the other's saw INTERNAL naming the zip, and
    # its task failed. It is asked again; ALREADY_EXISTS means the zip is there.
    from airflow_connectors.engine.connect import _add_package

    raced = "<_InactiveRpcError status = StatusCode.INTERNAL details = /tmp/a/pyfiles/{name}>"
    session = _RacingSession([raced, None])
    _add_package(session)
    assert session.calls == 2
    session = _RacingSession([raced, "[ARTIFACT_ALREADY_EXISTS] ..."])
    _add_package(session)
    assert session.calls == 2
    # Any other error is the session's failure, at once; a race that never ends too.
    other = _RacingSession(["StatusCode.INTERNAL details = out of disk"])
    with pytest.raises(RuntimeError, match="out of disk"):
        _add_package(other)
    assert other.calls == 1
    forever = _RacingSession([raced])
    with pytest.raises(RuntimeError, match="INTERNAL"):
        _add_package(forever, attempts=3)
    assert forever.calls == 3
