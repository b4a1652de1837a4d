"""The package zip Spark's executors get (``engine.package``) and the settings that decide
what a job ships: built once per content, atomically, importable by a Python that lacks
the editable install; ``[connectors] ship_package`` and ``executor_python``."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from airflow_connectors.engine.package import package_root, package_zip, submit_options
from airflow_connectors.settings import Settings, SettingsError
from airflow_connectors.testing.spark_standalone import executor_python


def test_zip_holds_the_modules_and_is_reused(tmp_path: Path) -> None:
    with ThreadPoolExecutor(4) as pool:  # tasks building it at the same moment
        paths = set(pool.map(lambda _: package_zip(tmp_path), range(4)))
    assert len(paths) == 1
    [path] = paths
    assert path.parent == tmp_path and path.name.startswith("airflow_connectors-")
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary files left
    names = zipfile.ZipFile(path).namelist()
    assert "airflow_connectors/__init__.py" in names
    assert "airflow_connectors/engine/reader.py" in names
    assert not [n for n in names if "__pycache__" in n or not n.endswith(".py")]
    expected = {
        f"airflow_connectors/{p.relative_to(package_root()).as_posix()}"
        for p in package_root().rglob("*.py")
        if "__pycache__" not in p.parts
    }
    assert set(names) == expected
    mtime = path.stat().st_mtime_ns
    assert package_zip(tmp_path) == path and path.stat().st_mtime_ns == mtime  # not rebuilt


@pytest.mark.slow
def test_a_python_without_the_repository_imports_the_engine_from_the_zip(
    tmp_path: Path,
) -> None:
    python = executor_python(tmp_path)
    probe = "import airflow_connectors"
    without = subprocess.run([python, "-c", probe], capture_output=True, text=True, cwd=tmp_path)
    assert without.returncode != 0 and "No module named 'airflow_connectors'" in without.stderr
    zipped = package_zip(tmp_path / "dist")
    code = (
        f"import sys; sys.path.insert(0, {str(zipped)!r}); "
        "import airflow_connectors.engine.reader as r, airflow_connectors.transports.file_input, "
        "airflow_connectors.formats.json_format, airflow_connectors.sinks.parquet; "
        "print(r.__file__); print(r.executor_identity()['id'])"
    )
    out = subprocess.run([python, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split()
    assert lines[0].startswith(str(zipped)) and lines[1] == "driver"


def test_ship_package_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIRFLOW__CONNECTORS__EXECUTOR_PYTHON", raising=False)
    monkeypatch.delenv("AIRFLOW__CONNECTORS__SHIP_PACKAGE", raising=False)
    s = Settings.load(state_store_url="sqlite://", warehouse="/tmp/wh")
    assert (s.ship_package, s.executor_python) == ("auto", None)
    assert not s.ships_package("local[*]") and s.ships_package("spark://127.0.0.1:7077")
    monkeypatch.setenv("AIRFLOW__CONNECTORS__SHIP_PACKAGE", "Never")
    monkeypatch.setenv("AIRFLOW__CONNECTORS__EXECUTOR_PYTHON", "/opt/py/bin/python")
    s = Settings.load(state_store_url="sqlite://", warehouse="/tmp/wh")
    assert s.executor_python == "/opt/py/bin/python" and not s.ships_package("spark://h:7077")
    opts = submit_options(s, "spark://h:7077", sys.executable)
    assert opts.py_files is None
    assert opts.conf == {
        "spark.pyspark.python": "/opt/py/bin/python",
        "spark.pyspark.driver.python": sys.executable,
    }
    monkeypatch.setenv("AIRFLOW__CONNECTORS__SHIP_PACKAGE", "sometimes")
    with pytest.raises(SettingsError) as e:
        Settings.load(state_store_url="sqlite://", warehouse="/tmp/wh")
    message = str(e.value)
    assert "\n" not in message and "ship_package" in message and "'sometimes'" in message
    assert "auto, always, never" in message


def test_always_ships_even_on_local(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    monkeypatch.setenv("AIRFLOW__CONNECTORS__SHIP_PACKAGE", "always")
    monkeypatch.delenv("AIRFLOW__CONNECTORS__EXECUTOR_PYTHON", raising=False)
    s = Settings.load(state_store_url="sqlite://", warehouse="/tmp/wh")
    opts = submit_options(s, "local[2]", sys.executable)
    assert opts.conf == {}
    assert opts.py_files and Path(opts.py_files).parent == tmp_path / "connectors" / "dist"
