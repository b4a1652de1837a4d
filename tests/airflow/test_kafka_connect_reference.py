"""The reference itself (issue 28): a real Kafka Connect worker (connect-runtime 4.3.1 in
standalone mode on the session's broker, with Kafka's built-in FileStreamSource
connector) and ``<airflow>/connect`` answer the same sequence of calls, and a test
compares them answer by answer: status codes, field names and JSON types. Values
differ (names, states, versions); shapes must not, except for the differences in
:data:`ALLOWED`, each with its reason. An entry of :data:`ALLOWED` that no longer occurs
fails the test too, so the list stays true.

A shape is the structure of a JSON body: an object's field names with their shapes, a
list's elements' shapes (the union over its elements), a scalar's JSON type. Where
Kafka Connect answers a map (``Map<String, ...>``: connectors or loggers by name, a
connector's config, a source partition or offset), the keys are the data, so the values'
shapes are compared, not the keys. A null matches any type (Kafka's ``String`` fields
are "string or null"); an empty list or map matches any list or map.

``pytest -s`` prints the table: each step, both status codes, and its differences
(``allowed``: in :data:`ALLOWED`; ``UNEXPECTED``: not)."""

from __future__ import annotations

import copy
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import yaml
from conftest import EndToEnd

from airflow_connectors.testing.kafka_connect import file_source

PIPELINE = "kcref"
NAME = "kcref.lines.files"
#: What POST /connectors asks to create here (a name no spec declares).
NEW_NAME = "kcref.lines.created"

# --- the two sides ---------------------------------------------------------------------------


@dataclass
class Side:
    """One REST API under test: where it is, its connector, its plugin and a logger of
    its own; ``answers`` keeps each step's JSON body (later steps build bodies from
    them)."""

    title: str
    base: str
    connector: str
    new_connector: str
    logger: str
    auth: tuple[str, str] | None = None
    answers: dict[str, Any] = field(default_factory=dict, repr=False)

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        kwargs: dict[str, Any] = {"auth": self.auth, "timeout": 120}
        if body is not None:
            kwargs["json"] = body
        resp = httpx.request(method, self.base + path, **kwargs)
        try:
            data = resp.json() if resp.content.strip() else None
        except ValueError:
            data = {"<not JSON>": resp.text[:200]}
        return resp.status_code, data

    def config(self) -> dict[str, str]:
        """The connector's config as this side's GET .../config answered it."""
        return dict(self.answers["GET config"])

    def plugin(self) -> str:
        return self.config()["connector.class"]

    def state(self) -> str | None:
        code, body = self.call("GET", f"/connectors/{self.connector}/status")
        return body.get("connector", {}).get("state") if code == 200 else None


@pytest.fixture(scope="module")
def ours(e2e: EndToEnd) -> Side:
    """``<airflow>/connect`` with a pipeline of one file connector that has run once (so
    it has a task and offsets)."""
    root = e2e.folder("kcref")
    (root / "src").mkdir(exist_ok=True)
    (root / "src" / "a.json").write_text('{"id": 1}\n{"id": 2}\n{"id": 3}\n')
    spec = {
        "pipeline": PIPELINE,
        "tables": {
            "lines": {
                "columns": {"id": "BIGINT NOT NULL"},
                "connectors": [
                    {
                        "name": "files",
                        "transport": {
                            "name": "file_input",
                            "config": {"path": str(root / "src"), "min_file_age": 0},
                        },
                        "format": {"name": "json", "config": {"update_format": "raw"}},
                    }
                ],
            }
        },
    }
    e2e.add({"kcref.yaml": yaml.safe_dump(spec)}, [NAME])
    af = e2e.airflow
    af.set_paused(NAME, False)
    assert af.wait_run(NAME, af.trigger(NAME))["state"] == "success"
    return Side(
        title="here",
        base=f"{af.url}/connect",
        connector=NAME,
        new_connector=NEW_NAME,
        logger="airflow_connectors",
        auth=("admin", af.password),
    )


@pytest.fixture(scope="module")
def reference(kafka_connect: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Side]:
    """The session's Kafka Connect worker with a FileStreamSource connector that is
    RUNNING and has committed an offset (its file read). The worker makes the topic
    (``topic.creation.default.*``): the test broker does not create topics itself."""
    worker = kafka_connect
    suffix = uuid.uuid4().hex[:8]
    source = tmp_path_factory.mktemp("kcref") / "lines.txt"
    source.write_text("one\ntwo\nthree\n")
    name = f"kcref-file-{suffix}"
    worker.create_connector(name, file_source(file=source, topic=f"kcref-{suffix}"))
    worker.wait_running(name)
    # Offsets reach the worker's store within offset.flush.interval.ms (1 s).
    deadline = time.monotonic() + 60
    side = Side(
        title="Kafka Connect",
        base=worker.url,
        connector=name,
        new_connector=f"{name}-created",
        logger="org.apache.kafka.connect",
    )
    while not side.call("GET", f"/connectors/{name}/offsets")[1].get("offsets"):
        assert time.monotonic() < deadline, "FileStreamSource committed no offset in 60 s"
        time.sleep(0.5)
    yield side
    for made in (name, side.new_connector):
        if made in worker.connectors():
            worker.delete_connector(made)


# --- shapes ----------------------------------------------------------------------------------

#: A shape: JSON kind -> detail (``object``: field -> shape; ``array``: the elements'
#: shape; ``map``: the values' shape; scalars: None). More than one kind: a union.
Shape = dict[str, Any]


def shape(value: Any, maps: frozenset[str], path: str = "$") -> Shape:
    """The shape of a JSON value; objects at ``maps`` paths are maps (keys are data)."""
    if value is None:
        return {"null": None}
    if isinstance(value, bool):
        return {"boolean": None}
    if isinstance(value, int):
        return {"integer": None}
    if isinstance(value, float):
        return {"number": None}
    if isinstance(value, str):
        return {"string": None}
    if isinstance(value, list):
        return {"array": union(shape(v, maps, f"{path}[]") for v in value)}
    if isinstance(value, dict):
        if path in maps:
            return {"map": union(shape(v, maps, f"{path}.*") for v in value.values())}
        return {"object": {k: shape(v, maps, f"{path}.{k}") for k, v in value.items()}}
    raise TypeError(f"not JSON: {value!r}")


def union(shapes: Any) -> Shape:
    """The union of shapes (a list's elements, a map's values): objects' fields merge;
    no shapes at all (an empty list) is the empty shape, which matches anything."""
    out: Shape = {}
    for s in shapes:
        for kind, detail in s.items():
            if kind not in out:
                out[kind] = copy.deepcopy(detail)
            elif kind == "object":
                fields = out[kind]
                for name, sub in detail.items():
                    fields[name] = union([fields[name], sub]) if name in fields else sub
            elif kind in ("array", "map"):
                out[kind] = union([out[kind], detail])
    return out


def brief(s: Shape) -> str:
    """A shape in a few words: ``string``, ``integer|null``, ``object{a,b}``, ``array``."""
    parts = []
    for kind in sorted(s):
        if kind == "object":
            parts.append("object{" + ",".join(sorted(s[kind])) + "}")
        elif kind in ("array", "map"):
            inner = brief(s[kind])
            parts.append(f"{kind}<{inner}>" if inner else kind)
        else:
            parts.append(kind)
    return "|".join(parts)


def compare(ref: Shape, ours: Shape, path: str = "$") -> list[str]:
    """The differences of ``ours`` from ``ref`` (Kafka Connect's), one line each."""
    if not ref or not ours:
        return []  # an empty list or map: nothing to compare
    ref_kinds, our_kinds = set(ref) - {"null"}, set(ours) - {"null"}
    if not ref_kinds or not our_kinds:
        return []  # null on one side: "X or null"
    diffs = []
    if ref_kinds != our_kinds:
        theirs = brief({k: ref[k] for k in ref_kinds})
        mine = brief({k: ours[k] for k in our_kinds})
        diffs.append(f"{path}: Kafka Connect {theirs}, here {mine}")
    for kind in sorted(ref_kinds & our_kinds):
        if kind == "object":
            rf, of = ref[kind], ours[kind]
            for name in sorted(rf.keys() - of.keys()):
                diffs.append(f"{path}.{name}: only on Kafka Connect ({brief(rf[name])})")
            for name in sorted(of.keys() - rf.keys()):
                diffs.append(f"{path}.{name}: only here ({brief(of[name])})")
            for name in sorted(rf.keys() & of.keys()):
                diffs += compare(rf[name], of[name], f"{path}.{name}")
        elif kind == "array":
            diffs += compare(ref[kind], ours[kind], f"{path}[]")
        elif kind == "map":
            diffs += compare(ref[kind], ours[kind], f"{path}.*")
    return diffs


#: Kafka Connect's ErrorMessage, every error answer's body.
ERROR_SHAPE = shape({"error_code": 404, "message": "m"}, frozenset())

# --- the steps -------------------------------------------------------------------------------

#: Where answers hold maps (see :func:`shape`).
INFO_MAPS = frozenset({"$.config"})
STATUS_MAPS: frozenset[str] = frozenset()
EXPANDED_MAPS = frozenset({"$", "$.*.info.config"})
ROOT_MAP = frozenset({"$"})
TASK_MAPS = frozenset({"$[].config"})
OFFSET_MAPS = frozenset({"$.offsets[].partition", "$.offsets[].offset"})

Body = Callable[[Side], Any] | dict[str, Any] | None
Check = Callable[[Any], str | None]


@dataclass(frozen=True)
class Step:
    """One call made on both sides: ``path`` with ``{c}`` (the side's connector),
    ``{new}`` (a connector name that does not exist), ``{plugin}`` (the connector's
    ``connector.class``) and ``{logger}``; ``body`` a JSON value or a function of the
    side; ``maps`` where the answer holds maps; ``own``: the answer is a map by connector
    name, of which only the side's connector is compared (the session's other tests
    have connectors of their own on both sides, some failed); ``settle`` a state to wait
    for after the call (both APIs act asynchronously; Kafka Connect's worker is there
    in a moment); ``check`` a value test of each side's answer (a message when it
    fails)."""

    label: str
    method: str
    path: str
    body: Body = None
    maps: frozenset[str] = frozenset()
    settle: str | None = None
    check: Check | None = None
    own: bool = False


def patch_body(side: Side) -> dict[str, Any]:
    """KIP-875's PATCH body: the offsets as this side's GET .../offsets showed them."""
    return {"offsets": side.answers["GET offsets"]["offsets"]}


def create_body(side: Side) -> dict[str, Any]:
    config = {k: v for k, v in side.config().items() if k != "name"}
    return {"name": side.new_connector, "config": config}


def errors_are(expected: str) -> Check:
    def check(body: Any) -> str | None:
        count = body.get("error_count") if isinstance(body, dict) else None
        ok = count == 0 if expected == "none" else isinstance(count, int) and count > 0
        return None if ok else f"error_count {count!r}, expected {expected}"

    return check


def bad(side: Side) -> dict[str, str]:
    return {**side.config(), "tasks.max": "two"}


C = "/connectors/{c}"
STEPS = [
    Step("GET /", "GET", "/"),
    Step("GET connectors", "GET", "/connectors"),
    Step("GET connectors expanded", "GET", "/connectors?expand=status&expand=info",
         maps=EXPANDED_MAPS, own=True),
    Step("GET connector", "GET", C, maps=INFO_MAPS),
    Step("GET config", "GET", f"{C}/config", maps=ROOT_MAP),
    Step("GET status", "GET", f"{C}/status"),
    Step("GET tasks", "GET", f"{C}/tasks", maps=TASK_MAPS),
    Step("GET task 0 status", "GET", f"{C}/tasks/0/status"),
    Step("PUT pause", "PUT", f"{C}/pause", settle="PAUSED"),
    Step("GET status (paused)", "GET", f"{C}/status"),
    Step("PUT resume", "PUT", f"{C}/resume", settle="RUNNING"),
    Step("PUT stop", "PUT", f"{C}/stop", settle="STOPPED"),
    Step("GET status (stopped)", "GET", f"{C}/status"),
    Step("GET offsets", "GET", f"{C}/offsets", maps=OFFSET_MAPS),
    Step("PATCH offsets", "PATCH", f"{C}/offsets", body=patch_body),
    Step("DELETE offsets", "DELETE", f"{C}/offsets"),
    Step("GET offsets (reset)", "GET", f"{C}/offsets", maps=OFFSET_MAPS),
    Step("PUT resume (stopped)", "PUT", f"{C}/resume", settle="RUNNING"),
    Step("POST restart tasks", "POST", f"{C}/restart?includeTasks=true&onlyFailed=false",
         settle="RUNNING"),
    Step("POST task 0 restart", "POST", f"{C}/tasks/0/restart"),
    Step("GET topics", "GET", f"{C}/topics", maps=ROOT_MAP, own=True),
    Step("PUT topics reset", "PUT", f"{C}/topics/reset"),
    Step("GET plugins", "GET", "/connector-plugins"),
    Step("GET plugins all", "GET", "/connector-plugins?connectorsOnly=false"),
    Step("GET plugin config", "GET", "/connector-plugins/{plugin}/config"),
    Step("PUT validate", "PUT", "/connector-plugins/{plugin}/config/validate",
         body=Side.config, check=errors_are("none")),
    Step("PUT validate (bad value)", "PUT", "/connector-plugins/{plugin}/config/validate",
         body=bad, check=errors_are("some")),
    Step("PUT config", "PUT", f"{C}/config", body=Side.config, maps=INFO_MAPS),
    Step("PUT config (bad value)", "PUT", f"{C}/config", body=bad),
    Step("POST connectors (create)", "POST", "/connectors", body=create_body, maps=INFO_MAPS),
    Step("GET loggers", "GET", "/admin/loggers", maps=ROOT_MAP),
    Step("GET logger root", "GET", "/admin/loggers/root"),
    Step("PUT logger DEBUG", "PUT", "/admin/loggers/{logger}", body={"level": "DEBUG"}),
    Step("GET logger (DEBUG)", "GET", "/admin/loggers/{logger}"),
    Step("PUT logger INFO", "PUT", "/admin/loggers/{logger}", body={"level": "INFO"}),
    Step("PUT logger (bad level)", "PUT", "/admin/loggers/{logger}", body={"level": "LOUD"}),
    Step("GET unknown connector", "GET", "/connectors/nope"),
    Step("GET unknown connector status", "GET", "/connectors/nope/status"),
]  # fmt: skip

#: Step -> (the exact differences it shows, why they are allowed). Differences that are
#: not inherent to the design (connectors declared in specs, no Kafka topics or
#: workers, not a Kafka Connect cluster) do not belong here.
ALLOWED: dict[str, tuple[frozenset[str], str]] = {
    "GET offsets": (
        frozenset(
            {
                "$.offsets[].offset.*: Kafka Connect integer, "
                "here boolean|integer|number|object{lines_before,mtime}|string",
            }
        ),
        "KIP-875's partition and offset are the connector's own maps (Map<String, ?>): "
        "FileStreamSource's offset is {position: <byte>}; a connector here has, per source "
        "key, {offset, records, completed, meta (file_input's {lines_before, mtime})} and "
        "the watermark's entry {key, late_after, since_relist}",
    ),
    "POST connectors (create)": (
        frozenset({"HTTP: Kafka Connect 201, here 409"}),
        "connectors are declared in pipeline specs (their DAG files), which the API does "
        "not write: creating one answers 409 saying where to declare it",
    ),
}

# --- the comparison --------------------------------------------------------------------------


@dataclass
class Outcome:
    step: Step
    codes: tuple[int, int]
    diffs: list[str]
    problems: list[str]


def run_step(step: Step, side: Side) -> tuple[int, Any]:
    path = step.path.format(
        c=side.connector,
        new=side.new_connector,
        logger=side.logger,
        plugin=side.plugin() if "{plugin}" in step.path else "",
    )
    body = step.body(side) if callable(step.body) else step.body
    code, answer = side.call(step.method, path, body)
    side.answers[step.label] = answer
    if step.own and code < 400 and isinstance(answer, dict):
        answer = {side.connector: answer.get(side.connector)}
    return code, answer


def settle(side: Side, state: str, timeout: float = 45.0) -> str | None:
    """Wait until the side's connector is in ``state``; a note when it is not."""
    deadline = time.monotonic() + timeout
    while (now := side.state()) != state:
        if time.monotonic() > deadline:
            return f"{side.title}: the connector is {now}, not {state}, {timeout:.0f} s later"
        time.sleep(0.5)
    return None


def compare_step(step: Step, ref: Side, ours: Side) -> Outcome:
    (rc, ra), (oc, oa) = run_step(step, ref), run_step(step, ours)
    problems: list[str] = []
    if step.settle:
        problems += [n for n in (settle(ref, step.settle), settle(ours, step.settle)) if n]
    diffs = []
    if rc != oc:
        diffs.append(f"HTTP: Kafka Connect {rc}, here {oc}")
    ref_shape, our_shape = shape(ra, step.maps), shape(oa, step.maps)
    if (rc >= 400) == (oc >= 400):
        diffs += compare(ref_shape, our_shape)
    if oc >= 400:  # an error answer is Kafka Connect's ErrorMessage, whatever the other side
        diffs += [f"error body: {d}" for d in compare(ERROR_SHAPE, our_shape) if rc < 400]
    if step.check is not None:
        for side, code, answer in ((ref, rc, ra), (ours, oc, oa)):
            failed = step.check(answer) if code < 400 else f"HTTP {code}"
            if failed:
                problems.append(f"{side.title}: {failed}")
    return Outcome(step, (rc, oc), diffs, problems)


def table(outcomes: list[Outcome]) -> str:
    width = max(len(o.step.label) for o in outcomes)
    lines = [f"{'step':<{width}}  KC   here  differences", "-" * (width + 40)]
    for o in outcomes:
        allowed = ALLOWED.get(o.step.label, (frozenset(), ""))[0]
        notes = [("allowed: " if d in allowed else "UNEXPECTED: ") + d for d in o.diffs]
        notes += [f"MISSING allowed: {d}" for d in sorted(allowed - set(o.diffs))]
        notes += [f"PROBLEM: {p}" for p in o.problems]
        first, *rest = notes or ["-"]
        lines.append(f"{o.step.label:<{width}}  {o.codes[0]:<4} {o.codes[1]:<5} {first}")
        lines += [f"{'':<{width}}  {'':<4} {'':<5} {n}" for n in rest]
    return "\n".join(lines)


def test_same_answers_as_kafka_connect(reference: Side, ours: Side) -> None:
    assert set(ALLOWED) <= {s.label for s in STEPS}, "ALLOWED names a step that is not run"
    outcomes = [compare_step(step, reference, ours) for step in STEPS]
    print("\n" + table(outcomes))
    if ALLOWED:
        print("\nallowed differences:")
        for label, (_, reason) in ALLOWED.items():
            print(f"  {label}: {reason}")
    failures = []
    for o in outcomes:
        allowed = ALLOWED.get(o.step.label, (frozenset(), ""))[0]
        unexpected = [d for d in o.diffs if d not in allowed]
        gone = sorted(allowed - set(o.diffs))
        failures += [f"{o.step.label}: {d}" for d in unexpected]
        failures += [f"{o.step.label}: allowed but no longer seen: {d}" for d in gone]
        failures += [f"{o.step.label}: {p}" for p in o.problems]
    assert not failures, "answers differ from Kafka Connect's:\n" + "\n".join(failures)


def test_shapes() -> None:
    """The shape rules themselves: maps compare values, null matches any type, lists
    merge their elements, and fields missing on either side are named."""
    maps = frozenset({"$"})
    assert compare(shape({"a": {"x": 1}}, maps), shape({"b": {"x": 2}}, maps)) == []
    assert compare(shape({"v": None}, frozenset()), shape({"v": "s"}, frozenset())) == []
    assert compare(shape([], frozenset()), shape([{"x": 1}], frozenset())) == []
    ref = shape({"t": [{"id": 1, "version": "4"}]}, frozenset())
    ours = shape({"t": [{"id": "1"}, {"id": 2, "more": True}]}, frozenset())
    assert compare(ref, ours) == [
        "$.t[].version: only on Kafka Connect (string)",
        "$.t[].more: only here (boolean)",
        "$.t[].id: Kafka Connect integer, here integer|string",
    ]
    assert brief(shape({"m": [{"a": 1}]}, frozenset())) == "object{m}"
