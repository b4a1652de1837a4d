"""The Connectors page with hundreds of connectors, in headless Chromium against a real
Airflow (the shared ``airflow standalone``): paging and the filter box, a connector's
last batches and throughput chart from real runs, its backlog (discovered, not
committed), its schema with stored versions, links into Airflow's UI, and the
``start_after`` dependency that holds a connector. Screenshots go to
``test-artifacts/ui/``.

Two pipelines: ``uip`` whose connectors really run (``events.files``: two files in two
batches; ``bad.flaky``: one file its batch cannot read, so the batch stays planned;
``later.after``: waits for both, held by the failed one) and ``uimany``, 200
connectors rendered from one generated spec that never run."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import EndToEnd
from helpers import headless_chromium

from airflow_connectors.state.store import ConnectorRef, SchemaColumn, StateStore

pytestmark = pytest.mark.airflow_server

ARTIFACTS = (
    Path(
        os.environ.get("AIRFLOW_CONNECTORS_TEST_ARTIFACTS")
        or Path(__file__).resolve().parents[2] / "test-artifacts"
    )
    / "ui"
)

ID = {"id": "BIGINT NOT NULL"}
JSON_RAW = {"name": "json", "config": {"update_format": "raw"}}
#: Files of ``events.files``: name -> ids (one batch each, tasks_max 2).
FILES = {"a.json": [1, 2, 3], "b.json": [4, 5, 6, 7, 8]}
BAD = '{"id": "not a number"}\n'
PASSWORD = "ui-s3cret-pw"
#: A source URL with a password (never fetched: its connector does not run).
SECRET_URL = f"http://reader:{PASSWORD}@127.0.0.1:9/rows.json"
#: uimany: 20 tables of 10 connectors; table t07's carry the label "gold".
TABLES, PER_TABLE = 20, 10


def many_names() -> list[str]:
    return sorted(f"uimany.t{t:02d}.c{c}" for t in range(TABLES) for c in range(PER_TABLE))


def many_spec(empty: Path) -> dict[str, Any]:
    """200 connectors that never run (manual trigger, nothing triggers them): datagen,
    and in t00 JSON files of an empty folder with inferred columns."""
    tables: dict[str, Any] = {}
    for t in range(TABLES):
        connectors = []
        for c in range(PER_TABLE):
            connector: dict[str, Any] = {"name": f"c{c}"}
            if t == 0:
                connector["transport"] = {
                    "name": "file_input",
                    "config": {"path": str(empty), "min_file_age": 0},
                }
                connector["format"] = JSON_RAW
            else:
                connector["transport"] = {"name": "datagen", "config": {"plan": [{"limit": 1}]}}
            if t == 7:
                connector["labels"] = ["gold"]
            connectors.append(connector)
        tables[f"t{t:02d}"] = {"connectors": connectors, **({} if t == 0 else {"columns": ID})}
    return {"pipeline": "uimany", "tables": tables}


class Ui:
    def __init__(self, e2e: EndToEnd, root: Path) -> None:
        self.e2e = e2e
        self.airflow = e2e.airflow
        self.root = root
        self.store = StateStore(f"sqlite:///{e2e.root / 'state.db'}")

    def get(self, path: str, **params: Any) -> Any:
        resp = self.airflow.client.get(f"/connect{path}", params=params)
        assert resp.status_code == 200, resp.text
        return resp.json()


@pytest.fixture(scope="module")
def ui(e2e: EndToEnd) -> Iterator[Ui]:
    root = e2e.folder("ui")
    for folder in ("src", "bad", "empty"):
        (root / folder).mkdir()
    for name, ids in FILES.items():
        (root / "src" / name).write_text("".join(json.dumps({"id": i}) + "\n" for i in ids))
    (root / "bad" / "bad.json").write_text(BAD)
    files = {"name": "file_input", "config": {"path": str(root / "src"), "min_file_age": 0}}
    bad = {"name": "file_input", "config": {"path": str(root / "bad"), "min_file_age": 0}}
    spec = {
        "pipeline": "uip",
        "tables": {
            "events": {
                "columns": ID,
                "connectors": [
                    {
                        "name": "files",
                        "labels": ["events.loaded"],
                        "tasks_max": 2,
                        "transport": files,
                        "format": JSON_RAW,
                    }
                ],
            },
            "bad": {
                "columns": ID,
                "connectors": [
                    {
                        "name": "flaky",
                        "labels": ["bad.loaded"],
                        "transport": bad,
                        "format": JSON_RAW,
                    }
                ],
            },
            "hush": {
                "columns": ID,
                "connectors": [
                    {
                        "name": "url",
                        "transport": {"name": "url_input", "config": {"path": SECRET_URL}},
                        "format": JSON_RAW,
                    }
                ],
            },
            "later": {
                "columns": ID,
                "connectors": [
                    {
                        "name": "after",
                        "start_after": ["events.loaded", "bad.loaded"],
                        "transport": {"name": "datagen", "config": {"plan": [{"limit": 2}]}},
                    }
                ],
            },
        },
    }
    e2e.add(
        {
            "uip.yaml": yaml.safe_dump(spec),
            "uimany.yaml": yaml.safe_dump(many_spec(root / "empty")),
        },
        ["uip.events.files", "uip.bad.flaky", "uip.hush.url", "uip.later.after", *many_names()],
    )
    af = e2e.airflow
    runs = {name: af.trigger(name) for name in ("uip.events.files", "uip.bad.flaky")}
    assert af.wait_run("uip.events.files", runs["uip.events.files"])["state"] == "success", (
        af.explain_run("uip.events.files", runs["uip.events.files"])
    )
    assert af.wait_run("uip.bad.flaky", runs["uip.bad.flaky"])["state"] == "failed"
    held = af.trigger("uip.later.after")
    assert af.wait_run("uip.later.after", held)["state"] == "success"  # gate skipped the rest
    ui = Ui(e2e, root)
    # Schema versions as discovery stores them for a table with inferred columns.
    one = ui.store.add_schema_version(
        "uimany", "t00", [SchemaColumn("id", "BIGINT")], based_on=None, origin="inferred"
    )
    ui.store.add_schema_version(
        "uimany",
        "t00",
        [SchemaColumn("id", "BIGINT"), SchemaColumn("note", "VARCHAR")],
        based_on=one,
        origin="new fields in a batch",
    )
    # What a failed read of the URL records (its connector never runs here).
    ui.store.record_failure(
        ConnectorRef("uip", "hush", "url"), f"cannot read {SECRET_URL}: connection refused"
    )
    yield ui
    # The 200 connectors leave the shared Airflow (their DAGs go stale): the modules
    # after this one list every connector.
    for name in ("uimany.yaml", "uimany_dags.py"):
        (e2e.dags / name).unlink(missing_ok=True)


@pytest.fixture(scope="module")
def browser(ui: Ui) -> Iterator[Any]:
    chrome = headless_chromium(1500, 1000)
    token = ui.airflow.client.headers["Authorization"].removeprefix("Bearer ")
    chrome.get(f"{ui.airflow.url}/api/v2/monitor/health")
    chrome.add_cookie({"name": "_token", "value": token, "path": "/"})  # Airflow's login
    chrome.get(f"{ui.airflow.url}/connect/ui")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        yield chrome
    finally:
        chrome.quit()


def wait_for(what: str, check: Any, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
            if last:
                return last
        except Exception as e:  # the page re-renders under us
            last = e
        time.sleep(0.3)
    pytest.fail(f"{what}: not seen in {timeout:.0f} s (last: {last!r})")


def read(what: str, reading: Any, timeout: float = 30) -> Any:
    """``reading()``'s value, read again when a refresh replaced an element it held
    (a stale element): the page re-renders what changed every 3 s."""
    from selenium.common.exceptions import StaleElementReferenceException

    deadline = time.monotonic() + timeout
    while True:
        try:
            return reading()
        except StaleElementReferenceException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def shown(browser: Any) -> list[str]:
    from selenium.webdriver.common.by import By

    rows: list[str] = read(
        "the rows",
        lambda: [
            tr.get_attribute("data-connector")
            for tr in browser.find_elements(By.CSS_SELECTOR, "table.connectors tbody tr")
        ],
    )
    return rows


def set_filter(browser: Any, text: str, status: str = "") -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select

    box = browser.find_element(By.ID, "filter")
    # Typed (select all, delete, the text): clear() fires no input event.
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(Keys.DELETE)
    if text:
        box.send_keys(text)
    # The page's first refresh after a load makes the status options (later ones only
    # change their counts): an option found before it is gone after it.
    wait_for(
        f"status {status!r} chosen",
        lambda: (
            Select(browser.find_element(By.ID, "state-filter")).select_by_value(status)
            or browser.find_element(By.ID, "state-filter").get_attribute("value") == status
        ),
    )


def click(browser: Any, css: str, what: str) -> None:
    """Find and click ``css`` as one retried step: the table re-renders on every
    refresh, so an element found just before one is stale when clicked."""
    from selenium.webdriver.common.by import By

    wait_for(what, lambda: browser.find_element(By.CSS_SELECTOR, css).click() or True)


def page_info(browser: Any, text: str) -> None:
    """Waits for the paging line to read ``text`` (the filter box applies what was typed
    a moment later: a count read at once may be of a shorter filter)."""
    from selenium.webdriver.common.by import By

    wait_for(f"paging {text!r}", lambda: browser.find_element(By.ID, "page-info").text == text)


def open_detail(browser: Any, name: str) -> Any:
    from selenium.webdriver.common.by import By

    set_filter(browser, name)
    wait_for(f"row {name}", lambda: name in shown(browser))
    click(
        browser, f'tr[data-connector="{name}"] button[data-action="details"]', f"details of {name}"
    )
    return wait_for(
        f"detail of {name}",
        lambda: browser.find_element(By.CSS_SELECTOR, f'#detail[data-connector="{name}"]'),
    )


def failed_uip(ui: Ui) -> list[str]:
    """The FAILED connectors of ``uip`` as the unfiltered page data says: ``bad.flaky``
    (its batch failed), and ``hush.url`` where a failure recorded without a batch (a
    failed discovery) counts as FAILED."""
    page = ui.get("/ui/connectors", q="uip.", limit=100)
    return [c["name"] for c in page["connectors"] if c["state"] == "FAILED"]


# --- REST -------------------------------------------------------------------------


def test_page_data_pages_and_filters_on_the_server(ui: Ui) -> None:
    names = many_names()
    first = ui.get("/ui/connectors", q="uimany", limit=25)
    assert first["total"] == 200
    assert [c["name"] for c in first["connectors"]] == names[:25]
    last = ui.get("/ui/connectors", q="UIMANY", offset=190, limit=25)
    assert [c["name"] for c in last["connectors"]] == names[190:]
    gold = ui.get("/ui/connectors", q="gold", limit=100)
    assert [c["name"] for c in gold["connectors"]] == [n for n in names if ".t07." in n]
    held = ui.get("/ui/connectors", q="uip.", status="held")
    assert [(c["name"], c["held_by"]) for c in held["connectors"]] == [
        ("uip.later.after", ["bad.flaky"])
    ]
    failed = ui.get("/ui/connectors", q="uip.", status="FAILED")
    assert [c["name"] for c in failed["connectors"]] == failed_uip(ui)
    assert "uip.bad.flaky" in failed_uip(ui)
    # A read-only user reads the page's data; the page's API has no way to steer.
    reader = ui.airflow.client_for("reader", "reader-pw")
    assert reader.get("/connect/ui/connectors", params={"q": "gold"}).json()["total"] == 10
    detail = reader.get("/connect/ui/connectors/uip.bad.flaky")
    assert detail.status_code == 200 and detail.json()["state"] == "FAILED"
    assert reader.put("/connect/ui/connectors/uip.bad.flaky").status_code == 405
    assert ui.airflow.client.get("/connect/ui/connectors/uip.nope.x").status_code == 404


def test_no_secret_in_the_page_data(ui: Ui) -> None:
    page = ui.airflow.client.get("/connect/ui/connectors", params={"q": "uip."})
    detail = ui.airflow.client.get("/connect/ui/connectors/uip.hush.url")
    assert page.status_code == detail.status_code == 200
    assert "connection refused" in detail.json()["latest_error"]
    assert "reader:***@" in detail.json()["latest_error"]
    for text in (page.text, detail.text):
        assert PASSWORD not in text


def test_backlog_is_what_was_discovered_and_not_committed(ui: Ui) -> None:
    pending = ui.store.pending_batches(ConnectorRef("uip", "bad", "flaky"))
    assert len(pending) == 1  # the batch of bad.json, planned, its ingest failed
    backlog = ui.get("/ui/connectors/uip.bad.flaky")["backlog"]
    assert backlog["batches"] == 1
    assert backlog["objects"] == sum(b.planned_items for b in pending) == 1
    assert backlog["bytes"] == len(BAD.encode())
    assert ui.get("/ui/connectors/uip.events.files")["backlog"]["batches"] == 0


# --- in the browser ---------------------------------------------------------------


def test_filter_box_and_paging_show_the_right_rows(ui: Ui, browser: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    names = many_names()
    Select(browser.find_element(By.ID, "page-size")).select_by_value("25")
    set_filter(browser, "uimany")
    wait_for("the first page of uimany", lambda: shown(browser) == names[:25])
    page_info(browser, "1-25 of 200")
    browser.save_screenshot(str(ARTIFACTS / "200-connectors-page-1.png"))
    click(browser, "#next", "next page")
    wait_for("the second page", lambda: shown(browser) == names[25:50])
    page_info(browser, "26-50 of 200")

    set_filter(browser, "gold")
    gold = [n for n in names if ".t07." in n]
    wait_for("the gold connectors", lambda: shown(browser) == gold)
    page_info(browser, "1-10 of 10")

    set_filter(browser, "", status="HELD")
    wait_for("the held connectors", lambda: "uip.later.after" in shown(browser))
    assert all(
        browser.find_element(By.CSS_SELECTOR, f'tr[data-connector="{n}"] td.held-by').text
        for n in shown(browser)
    )
    browser.save_screenshot(str(ARTIFACTS / "filter-held.png"))
    set_filter(browser, "uip.", status="FAILED")
    wait_for("the failed connectors", lambda: shown(browser) == failed_uip(ui))


def test_detail_shows_batches_chart_schema_and_links(ui: Ui, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    name = "uip.events.files"
    detail = open_detail(browser, name)  # its children are replaced when its data changes

    def batches() -> list[dict[str, str]]:
        return [
            {
                "batch": tr.get_attribute("data-batch"),
                **{
                    cell: tr.find_element(By.CSS_SELECTOR, css).text
                    for cell, css in (
                        ("rows", "td.rows"),
                        ("state", ".state"),
                        ("duration", "td.duration"),
                        ("errors", "td.errors"),
                    )
                },
            }
            for tr in detail.find_elements(By.CSS_SELECTOR, "table.batches tbody tr")
        ]

    wait_for("two batches", lambda: len(read("the batches", batches)) == 2)

    def shown_detail() -> dict[str, Any]:
        return {
            "batches": batches(),
            "points": {
                p.get_attribute("data-batch"): p.get_attribute("data-value")
                for p in detail.find_elements(By.CSS_SELECTOR, "svg.throughput circle.point")
            },
            "declared": [
                tr.text for tr in detail.find_elements(By.CSS_SELECTOR, "table.schema-declared tr")
            ],
            "hrefs": {
                cls: detail.find_element(By.CSS_SELECTOR, f"a.{cls}").get_attribute("href")
                for cls in ("link-dag", "link-runs", "link-asset")
            },
            "run_links": [
                a.get_attribute("href") for a in detail.find_elements(By.CSS_SELECTOR, "a.run-link")
            ],
        }

    seen = read("the connector's detail", shown_detail)
    rows = seen["batches"]
    assert sorted(int(r["rows"]) for r in rows) == sorted(len(ids) for ids in FILES.values())
    assert all(r["state"] == "committed" for r in rows)
    assert all(float(r["duration"]) > 0 for r in rows)
    assert all(r["errors"] == "0" for r in rows)
    # One point per batch, each one its batch's records/s.
    assert sorted(seen["points"]) == sorted(r["batch"] for r in rows)
    assert all(float(v) > 0 for v in seen["points"].values())
    # The declared schema; no versions stored for declared columns.
    assert seen["declared"] == ["id BIGINT NOT NULL"]
    # Links into Airflow 3's UI: the DAG, its runs, the asset its `finished` task emits.
    assets = ui.airflow.client.get(
        "/api/v2/assets", params={"uri_pattern": "connector://uip/events/files"}
    ).json()["assets"]
    asset_id = next(a["id"] for a in assets if a["uri"] == "connector://uip/events/files")
    url = ui.airflow.url
    assert seen["hrefs"] == {
        "link-dag": f"{url}/dags/{name}",
        "link-runs": f"{url}/dags/{name}/runs",
        "link-asset": f"{url}/assets/{asset_id}",
    }
    run_ids = {r["dag_run_id"] for r in ui.airflow.runs(name)}
    run_links = seen["run_links"]
    assert run_links and all(
        any(h == f"{url}/dags/{name}/runs/{r}" for r in run_ids) for h in run_links
    )
    browser.save_screenshot(str(ARTIFACTS / "detail-batches-chart.png"))

    inferred = open_detail(browser, "uimany.t00.c0")

    def versions() -> list[tuple[str, str]]:
        return [
            (v.get_attribute("data-version"), v.text)
            for v in inferred.find_elements(By.CSS_SELECTOR, ".schema-version")
        ]

    wait_for("two schema versions", lambda: len(read("the versions", versions)) == 2)
    assert [v for v, _ in read("the versions", versions)] == ["2", "1"]  # newest first
    assert "id BIGINT, note VARCHAR" in read("the versions", versions)[0][1]
    assert "columns inferred" in read(
        "the schema", lambda: inferred.find_element(By.CSS_SELECTOR, ".schema").text
    )
    browser.save_screenshot(str(ARTIFACTS / "detail-schema-versions.png"))


def test_detail_shows_backlog_and_the_blocker(ui: Ui, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    open_detail(browser, "uip.bad.flaky")

    def flaky() -> Any:
        return browser.find_element(By.CSS_SELECTOR, '#detail[data-connector="uip.bad.flaky"]')

    wait_for(
        "the failed batch", lambda: flaky().find_elements(By.CSS_SELECTOR, "table.batches tbody tr")
    )

    def backlog() -> tuple[dict[str, str], list[tuple[str, str]], int]:
        detail = flaky()
        field = {
            dd.get_attribute("data-field"): dd.text
            for dd in detail.find_elements(By.CSS_SELECTOR, "dl.backlog dd")
        }
        batches = [
            (
                tr.find_element(By.CSS_SELECTOR, ".state").text,
                tr.find_element(By.CSS_SELECTOR, "td.errors").text,
            )
            for tr in detail.find_elements(By.CSS_SELECTOR, "table.batches tbody tr")
        ]
        return (
            field,
            batches,
            len(detail.find_elements(By.CSS_SELECTOR, "svg.throughput circle.point")),
        )

    field, batches, points = read("the failed connector's detail", backlog)
    assert (field["batches"], field["objects"], field["bytes"]) == ("1", "1", str(len(BAD)))
    assert field["lag"] == "—"  # files: a lag the transport cannot tell (sequence sources can)
    [(state, errors)] = batches
    assert state == "failed"
    assert int(errors) >= 1
    assert points == 0
    browser.save_screenshot(str(ARTIFACTS / "detail-backlog.png"))
    # A refresh that brings the same detail keeps its elements (a selection or a hovered
    # link survives): one marked now is still there two refreshes (3 s each) later.
    browser.execute_script("document.querySelector('#detail h2').dataset.kept = 'yes'")
    time.sleep(6.5)
    assert browser.execute_script("return document.querySelector('#detail h2').dataset.kept") == (
        "yes"
    )

    open_detail(browser, "uip.later.after")

    def held() -> Any:
        return browser.find_element(By.CSS_SELECTOR, '#detail[data-connector="uip.later.after"]')

    text = wait_for("the blocker", lambda: held().find_element(By.CSS_SELECTOR, ".held-by").text)
    assert text == "held by bad.flaky: not finished"

    def waits() -> tuple[dict[str, str], str, str, str]:
        detail = held()
        holding = {
            li.get_attribute("data-connector"): li.get_attribute("data-holding")
            for li in detail.find_elements(By.CSS_SELECTOR, "ul.waits-for li")
        }
        last = detail.find_element(By.CSS_SELECTOR, ".last-run")
        return (
            holding,
            detail.find_element(By.CSS_SELECTOR, ".gate").text,
            last.text,
            last.find_element(By.CSS_SELECTOR, "a").get_attribute("href"),
        )

    holding, gate, last_run, last_href = read("the held connector's detail", waits)
    assert holding == {"events.files": "false", "bad.flaky": "true"}
    assert "waits (start_after events.loaded, bad.loaded) for bad.flaky" in gate
    # Its run was held at the gate.
    [run] = [r["dag_run_id"] for r in ui.airflow.runs("uip.later.after")]
    assert last_run == f"latest run {run}: success, gate skipped (the gate held the run)"
    assert last_href == f"{ui.airflow.url}/dags/uip.later.after/runs/{run}"
    # The pipeline's graph: the arrow from the blocker is the one marked holding.
    edges = {
        (e.get_attribute("data-from"), e.get_attribute("data-holding"))
        for e in browser.find_elements(
            By.CSS_SELECTOR, 'svg.start-after-graph[data-pipeline="uip"] line'
        )
    }
    assert edges == {("events.files", "false"), ("bad.flaky", "true")}
    browser.save_screenshot(str(ARTIFACTS / "detail-held-by.png"))


# --- what the user may do (issue 22, item 9) ----------------------------------------

#: The page's buttons that change a connector.
CHANGES = ("pause", "resume", "restart", "stop")


def token_of(client: Any) -> str:
    return str(client.headers["Authorization"]).removeprefix("Bearer ")


def log_in(browser: Any, ui: Ui, token: str) -> None:
    """The page afresh with ``token`` as Airflow's login cookie."""
    browser.add_cookie({"name": "_token", "value": token, "path": "/"})
    browser.get(f"{ui.airflow.url}/connect/ui")


def buttons(browser: Any, name: str) -> list[str]:
    from selenium.webdriver.common.by import By

    actions: list[str] = read(
        f"the buttons of {name}",
        lambda: [
            b.get_attribute("data-action")
            for b in browser.find_elements(By.CSS_SELECTOR, f'tr[data-connector="{name}"] button')
            if b.get_attribute("data-action")
        ],
    )
    return actions


def notice(browser: Any, name: str, kind: str) -> str:
    from selenium.webdriver.common.by import By

    def text() -> str:
        found = browser.find_elements(
            By.CSS_SELECTOR, f'tr[data-connector="{name}"] .notice[data-kind="{kind}"] .notice-text'
        )
        return str(found[0].text) if found else ""

    return str(read(f"the {kind} notice of {name}", text))


def dag_paused(ui: Ui, dag_id: str) -> bool:
    return bool(ui.airflow.client.get(f"/api/v2/dags/{dag_id}").json()["is_paused"])


def test_page_data_says_what_the_user_may_do(ui: Ui) -> None:
    admin = ui.get("/ui/connectors", q="uip.", limit=100)["connectors"]
    assert len(admin) == 4 and all(c["can"] == {"change": True} for c in admin)
    assert ui.get("/ui/connectors/uip.events.files")["can"] == {"change": True}
    reader = ui.airflow.client_for("reader", "reader-pw")
    page = reader.get("/connect/ui/connectors", params={"q": "uip.", "limit": 100}).json()
    assert [c["name"] for c in page["connectors"]] == [c["name"] for c in admin]
    assert all(c["can"] == {"change": False} for c in page["connectors"])
    detail = reader.get("/connect/ui/connectors/uip.events.files").json()
    assert detail["can"] == {"change": False}
    # The API agrees with the page data: the reader's change is refused.
    refused = reader.put("/connect/connectors/uip.events.files/pause")
    assert refused.status_code == 403
    assert "may not change connector(s) uip.events.files" in refused.json()["message"]


def test_reader_sees_no_action_and_a_refusal_is_shown(ui: Ui, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    name = "uip.events.files"
    uip = ["uip.bad.flaky", "uip.events.files", "uip.hush.url", "uip.later.after"]
    paused = dag_paused(ui, name)
    try:
        log_in(browser, ui, token_of(ui.airflow.client_for("reader", "reader-pw")))
        set_filter(browser, "uip.")
        wait_for("the uip connectors", lambda: shown(browser) == uip)
        assert {n: buttons(browser, n) for n in uip} == {n: ["details"] for n in uip}
        assert not browser.find_elements(
            By.CSS_SELECTOR, ", ".join(f'button[data-action="{a}"]' for a in CHANGES)
        )
        assert all(
            browser.find_element(By.CSS_SELECTOR, f'tr[data-connector="{n}"] .read-only').text
            == "read-only"
            for n in uip
        )
        browser.save_screenshot(str(ARTIFACTS / "reader-no-actions.png"))
        # The action endpoint the page uses, called by the page as the reader: the API
        # refuses and the page shows its message in the connector's row.
        browser.execute_script("act(arguments[0], 'pause')", name)
        text = wait_for("the refusal", lambda: notice(browser, name, "error"))
        assert text.startswith("pause refused (403): user 'reader' may not change connector(s)")
        assert "DAG edit access" in text
        assert notice(browser, name, "ok") == ""
        time.sleep(4)  # a refresh later (every 3 s) it is still there
        assert notice(browser, name, "error") == text
        assert dag_paused(ui, name) == paused
        browser.save_screenshot(str(ARTIFACTS / "reader-refused.png"))
    finally:
        log_in(browser, ui, token_of(ui.airflow.client))


def test_admin_sees_actions_and_a_refused_click_is_shown(ui: Ui, browser: Any) -> None:

    # A successful action looks like one: the DAG's flag flips, the row says accepted.
    other = "uimany.t05.c0"
    set_filter(browser, other)
    wait_for(f"row {other}", lambda: shown(browser) == [other])
    for _ in range(2):  # pause then resume, or the other way round: left as found
        paused = dag_paused(ui, other)
        action = "resume" if paused else "pause"
        wait_for(f"the {action} button", lambda a=action: a in buttons(browser, other))
        assert buttons(browser, other) == ["details", action, "restart"]
        click(
            browser,
            f'tr[data-connector="{other}"] button[data-action="{action}"]',
            f"the {action} button",
        )
        wait_for(f"{action} done", lambda p=paused: dag_paused(ui, other) is not p)
        assert wait_for("the success", lambda: notice(browser, other, "ok")).endswith(
            f"{action}: accepted"
        )
        assert notice(browser, other, "error") == ""

    # The admin's login is downgraded to the reader's after the page showed the buttons:
    # the click is refused and the page shows the API's message next to the connector.
    name = "uip.events.files"
    set_filter(browser, "uip.")
    wait_for(f"row {name}", lambda: name in shown(browser))
    paused = dag_paused(ui, name)
    action = "resume" if paused else "pause"
    wait_for(f"the {action} button", lambda: action in buttons(browser, name))
    reader = token_of(ui.airflow.client_for("reader", "reader-pw"))
    admin = token_of(ui.airflow.client)
    selector = f'tr[data-connector="{name}"] button[data-action="{action}"]'
    try:
        for _ in range(5):
            browser.add_cookie({"name": "_token", "value": reader, "path": "/"})
            clicked = browser.execute_script(
                "const b = document.querySelector(arguments[0]);"
                " if (!b || b.disabled) return false; b.click(); return true;",
                selector,
            )
            if clicked:
                break
            # A refresh as the reader took the button away first: again, as the admin.
            browser.add_cookie({"name": "_token", "value": admin, "path": "/"})
            wait_for(f"the {action} button", lambda: action in buttons(browser, name))
        else:
            pytest.fail("could not click the button with the downgraded login")
        text = wait_for("the refusal", lambda: notice(browser, name, "error"))
        assert text.startswith(
            f"{action} refused (403): user 'reader' may not change connector(s) {name}"
        )
        assert notice(browser, name, "ok") == ""
        assert dag_paused(ui, name) == paused
        # The next refresh (as the reader now) takes the buttons away; the message stays.
        wait_for("no action button", lambda: buttons(browser, name) == ["details"])
        assert notice(browser, name, "error") == text
        browser.save_screenshot(str(ARTIFACTS / "admin-downgraded-refused.png"))
        # Dismissed, it goes.
        click(browser, f'tr[data-connector="{name}"] .notice .dismiss', "dismiss")
        wait_for("the refusal dismissed", lambda: notice(browser, name, "error") == "")
    finally:
        log_in(browser, ui, admin)
    set_filter(browser, name)
    wait_for("the admin's buttons again", lambda: action in buttons(browser, name))
