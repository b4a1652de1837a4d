"""The documentation site (docs/, Sphinx with MyST Markdown) and the README.

The site builds with warnings as errors (``-W -n``): a link to a page or heading that
does not exist, a plugin page whose settings directive names no plugin, a plugin with no
page all fail here. Internal links are what the build checks; external ones are not
reachable from the test machine. Every plugin's page renders its settings from its config
model, row for row what the REST API's plugin-config answer holds. Every whole pipeline
spec in the pages and the README validates, and every Python block compiles; the
examples behind markers run as written in their own tests (``docs_examples``)."""

from __future__ import annotations

import ast
import html
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from docs_examples import DOCS, doc_block

from airflow_connectors.airflow.api.connect.plugin_config import (
    definitions,
    plugin_model,
    registries,
)
from airflow_connectors.catalog import load_pipeline

ROOT = Path(__file__).parents[1]
README = ROOT / "README.md"
FOLDERS = {"source": "transports", "converter": "formats", "sink": "sinks"}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built from scratch as ``make docs`` builds it."""
    out = tmp_path_factory.mktemp("site")
    flags = ["-E", "-W", "-n", "--keep-going", "-q", "-b", "html"]
    build = subprocess.run(
        [sys.executable, "-m", "sphinx", *flags, str(DOCS), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, f"the docs build failed:\n{build.stderr[-6000:]}"
    return out


def cells(page: str, heading_id: str) -> list[list[str]]:
    """The rows of the first table after the heading ``heading_id`` of a built page."""
    text = page.split(f'id="{heading_id}"', 1)[1]
    table = text.split("<table", 1)[1].split("</table>", 1)[0]
    return [
        [
            html.unescape(re.sub(r"<[^>]+>", "", c)).strip()
            for c in re.findall(r"<td[^>]*>(.*?)</td>", r, re.S)
        ]
        for r in re.findall(r"<tr[^>]*>(.*?)</tr>", table, re.S)
        if "<td" in r
    ]


def plugins() -> list[tuple[str, str]]:
    return [(kind, name) for kind, reg in registries() for name in sorted(reg.names())]


@pytest.mark.parametrize(("kind", "name"), plugins())
def test_each_plugin_page_shows_the_settings_the_api_answers(
    site: Path, kind: str, name: str
) -> None:
    source = DOCS / FOLDERS[kind] / f"{name}.md"
    assert source.is_file(), f"the {kind} plugin {name} has no page {source}"
    assert f"{{plugin-settings}} {kind} {name}" in source.read_text()
    page = (site / FOLDERS[kind] / f"{name}.html").read_text()
    heading = "settings"
    if name in ("gcs_input", "azure_blob_input"):  # one page describes both, a table each
        page = (site / "transports" / "gcs_input.html").read_text()
        heading = f"settings-of-{name.replace('_', '-')}"
    api = definitions(plugin_model(name, kind), group=name)
    rows = cells(page, heading)
    assert [r[0] for r in rows] == [d["name"] for d in api]
    for row, d in zip(rows, api, strict=True):
        assert row[1] == d["type"]
        assert row[2] == ("required" if d["required"] else (d["default_value"] or ""))
        assert plain(d["documentation"])[:60] in plain(row[3])


def plain(text: str) -> str:
    """Text as rendered and as written, compared alike: no markup, plain quotes."""
    text = " ".join(text.replace("``", "").replace("`", "").split())
    pairs = [("\u2018", "'"), ("\u2019", "'"), ("\u201c", '"'), ("\u201d", '"'), ("\u2026", "...")]
    for curly, straight in pairs:
        text = text.replace(curly, straight)
    return text


def code_blocks(language: str) -> list[tuple[Path, str]]:
    pages = [README, *sorted(DOCS.rglob("*.md"))]
    return [
        (p, m.group(1))
        for p in pages
        for m in re.finditer(rf"```{language}\n(.*?)```", p.read_text(), re.S)
    ]


def test_every_whole_spec_in_the_docs_validates(tmp_path: Path) -> None:
    checked = 0
    for n, (page, body) in enumerate(code_blocks("yaml")):
        doc = yaml.safe_load(body)
        # Excerpts (a table's fields, `...` for what the page leaves out) are not specs.
        if not (isinstance(doc, dict) and "tables" in doc) or "..." in body:
            continue
        spec = tmp_path / f"spec{n}.yaml"
        spec.write_text(body if "pipeline" in doc else "pipeline: docs\n" + body)
        try:
            load_pipeline(spec)
        except Exception as e:
            pytest.fail(f"a spec in {page.relative_to(ROOT)} does not validate: {e}")
        checked += 1
    assert checked >= 10


def test_every_python_block_compiles() -> None:
    blocks = code_blocks("python")
    assert len(blocks) >= 10
    for page, body in blocks:
        try:
            ast.parse(body)
        except SyntaxError as e:
            pytest.fail(f"a Python block in {page.relative_to(ROOT)} does not compile: {e}")


def test_the_readme_is_one_screen_with_the_two_commands() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 100
    assert "bash scripts/quickstart.sh" in text and "bash scripts/test.sh" in text
    # CI runs the README's test command exactly.
    assert "bash scripts/test.sh" in (ROOT / ".ci" / "run").read_text()
    for target in re.findall(r"\]\(([^)#]+)\)", text):
        assert (ROOT / target).exists(), f"the README links to {target}, which does not exist"


def test_the_readme_example_validates(tmp_path: Path) -> None:
    spec = tmp_path / "landing.yaml"
    spec.write_text(doc_block_readme("yaml"))
    table = load_pipeline(spec).table("orders")
    assert table.connectors[0].transport.name == "s3_input"
    assert table.sink is not None and table.sink.name == "delta"
    ast.parse(doc_block_readme("python"))


def doc_block_readme(language: str) -> str:
    after = README.read_text().split("<!-- readme-example -->", 1)[1]
    return after.split(f"```{language}\n", 1)[1].split("```", 1)[0]


def test_markers_find_their_examples() -> None:
    for marker in (
        "pipeline-builder-example",
        "keys-example",
        "task-group-example",
        "transport-example",
    ):
        assert doc_block(f"<!-- {marker} -->", "python" if marker != "keys-example" else "yaml")
