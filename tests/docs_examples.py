"""The documentation's examples, for the tests that run them as written.

An example is the first code block of a language after an HTML comment marker (such as
``<!-- keys-example -->``) on one of the pages under ``docs/``
(``AIRFLOW_CONNECTORS_DOCS``: a draft of them, to try a page before it is merged)."""

from __future__ import annotations

import os
from pathlib import Path

DOCS = Path(os.environ.get("AIRFLOW_CONNECTORS_DOCS") or Path(__file__).parents[1] / "docs")


def doc_page(marker: str) -> Path:
    """The page holding ``marker`` (exactly one must)."""
    pages = [p for p in sorted(DOCS.rglob("*.md")) if marker in p.read_text()]
    assert len(pages) == 1, f"{marker} must be on exactly one page under {DOCS}, not {pages}"
    return pages[0]


def doc_block(marker: str, language: str) -> str:
    """The first ``language`` code block after ``marker`` in the docs."""
    after = doc_page(marker).read_text().split(marker, 1)[1]
    fence = f"```{language}\n"
    assert fence in after, f"no {language} block after {marker} in {doc_page(marker)}"
    return after.split(fence, 1)[1].split("```", 1)[0]
