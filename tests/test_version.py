"""The version lives in one place, ``__version__`` in airflow_connectors/__init__.py:
the distribution's metadata is built from it (pyproject.toml's dynamic version), and no
module of the package writes it again."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

import yaml

from airflow_connectors import __version__

ROOT = Path(__file__).resolve().parents[1]


def test_pyproject_reads_the_version_from_the_package() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in config["project"]
    assert config["project"]["dynamic"] == ["version"]
    assert config["tool"]["hatch"]["version"]["path"] == "airflow_connectors/__init__.py"
    assert re.fullmatch(r"\d+\.\d+\.\d+([abc]|rc|\.dev|\.post)?\d*", __version__)


def test_the_installed_metadata_is_the_packages_version() -> None:
    installed = importlib.metadata.version("airflow-connectors")
    assert installed == __version__, (
        f"the installed metadata says {installed}, the package {__version__}: "
        "run scripts/bootstrap.sh (make setup)"
    )


def test_no_module_of_the_package_writes_the_version_again() -> None:
    literal = f'"{__version__}"'
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in sorted((ROOT / "airflow_connectors").rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        # A setting's version_added stays the version that added it.
        if literal in line and "__version__ =" not in line and "version_added" not in line
    ]
    assert not found, f"the version written again (use airflow_connectors.__version__): {found}"


def test_the_compose_images_are_tagged_with_the_version() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yaml").read_text())
    images = {service["image"] for service in compose["services"].values() if "image" in service}
    ours = {image for image in images if image.startswith("airflow-connectors:")}
    assert ours == {f"airflow-connectors:{__version__}"}, images
