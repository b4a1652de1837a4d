"""``labels`` and ``start_after`` as a graph: a connector waits for every connector
carrying a label it names. Validation rejects a ``start_after`` that names no carried
label or closes a cycle; the embedded runner starts connectors in the graph's order; the
Airflow rendering and the gate wait for the carriers.

Every walk is iterative: a ``start_after`` chain of thousands of connectors must not
exhaust Python's call stack."""

from __future__ import annotations

from collections.abc import Container, Iterable, Iterator, Mapping, Sequence

from airflow_connectors.spec.errors import SpecError, path_str
from airflow_connectors.spec.models import ConnectorSpec, PipelineSpec, TableSpec


def label_carriers(pipeline: PipelineSpec, labels: tuple[str, ...] | list[str]) -> list[str]:
    """``table.connector`` of every connector carrying one of ``labels``, in declaration
    order. Rendering asks this for every connector of a pipeline: the carriers are
    indexed once per pipeline (:func:`_label_index`), not scanned on each call."""
    if not labels:
        return []
    index = _label_index(pipeline)
    found = {position for label in labels for position in index.get(label, ())}
    return [endpoint for _, endpoint in sorted(found)]


#: The tables of the pipeline last indexed and its index (one entry: a DAG file renders
#: one pipeline at a time). The tables themselves are kept, not their id, so a new
#: pipeline can never be taken for the last one; specs are immutable.
_last_index: tuple[tuple[TableSpec, ...], dict[str, list[tuple[int, str]]]] | None = None


def _label_index(pipeline: PipelineSpec) -> dict[str, list[tuple[int, str]]]:
    """label -> (position in the pipeline, ``table.connector``) of its carriers."""
    global _last_index
    last = _last_index
    if last is not None and last[0] is pipeline.tables:
        return last[1]
    index: dict[str, list[tuple[int, str]]] = {}
    for position, (table, connector) in enumerate(pipeline.connectors()):
        for label in dict.fromkeys(connector.labels):
            index.setdefault(label, []).append((position, f"{table.name}.{connector.name}"))
    _last_index = (pipeline.tables, index)
    return index


def start_order(
    targets: list[tuple[TableSpec, ConnectorSpec]],
) -> list[tuple[TableSpec, ConnectorSpec]]:
    """``targets`` with each connector after the targets carrying a label it waits for,
    otherwise in spec order, so one round of an embedded run can start a whole
    ``start_after`` chain, however it is declared. Kahn's algorithm (no recursion: chains
    of thousands of connectors); connectors on a cycle, which validation rejects, keep
    their spec order at the end."""
    import heapq

    carriers: dict[str, list[int]] = {}
    for i, (_, c) in enumerate(targets):
        for label in c.labels:
            carriers.setdefault(label, []).append(i)
    waiting_on = [0] * len(targets)  # carriers each target still waits for
    unblocks: list[list[int]] = [[] for _ in targets]
    for i, (_, c) in enumerate(targets):
        for j in {j for label in c.start_after or () for j in carriers.get(label, ())}:
            if j != i:
                waiting_on[i] += 1
                unblocks[j].append(i)
    ready = [i for i, n in enumerate(waiting_on) if n == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for k in unblocks[i]:
            waiting_on[k] -= 1
            if waiting_on[k] == 0:
                heapq.heappush(ready, k)
    placed = set(order)
    order += [i for i in range(len(targets)) if i not in placed]
    return [targets[i] for i in order]


def start_after_errors(parsed: Sequence[tuple[str, int, ConnectorSpec]]) -> list[SpecError]:
    """The problems of the connectors' ``start_after``: not empty, names only carried
    labels, no cycles. ``parsed``: (table, index in its connectors, connector) of every
    connector that parsed, even in tables with errors, so all problems show at once."""
    carriers: dict[str, list[str]] = {}
    where: dict[str, list[str | int]] = {}
    for table, i, c in parsed:
        where[f"{table}.{c.name}"] = ["tables", table, "connectors", i]
        for label in c.labels:
            carriers.setdefault(label, []).append(f"{table}.{c.name}")
    errors, waits = _label_errors(parsed, carriers)
    return errors + _cycle_errors(waits, carriers, where)


def _label_errors(
    parsed: Sequence[tuple[str, int, ConnectorSpec]], carriers: Mapping[str, list[str]]
) -> tuple[list[SpecError], dict[str, tuple[str, ...]]]:
    """The empty ``start_after`` lists and the labels no connector carries, and what
    each connector with a non-empty ``start_after`` waits for."""
    errors: list[SpecError] = []
    waits: dict[str, tuple[str, ...]] = {}
    for table, i, c in parsed:
        if c.start_after is None:
            continue
        ep = f"{table}.{c.name}"
        here = path_str(["tables", table, "connectors", i, "start_after"])
        if not c.start_after:
            errors.append(
                SpecError(
                    here,
                    f"empty 'start_after' for connector {ep}; name at least one label, or remove the field",
                )
            )
            continue
        for label in c.start_after:
            if label not in carriers:
                known = (
                    ", ".join(sorted(carriers))
                    or "(none: add 'labels' to the connectors to wait for)"
                )
                errors.append(
                    SpecError(
                        here,
                        f"connector {ep} waits for label {label!r}, which no connector carries; labels in this pipeline: {known}",
                    )
                )
        waits[ep] = c.start_after
    return errors, waits


def _cycle_errors(
    waits: Mapping[str, tuple[str, ...]],
    carriers: Mapping[str, list[str]],
    where: Mapping[str, list[str | int]],
) -> list[SpecError]:
    """One error per distinct cycle of ``start_after`` waits, at the first connector of
    the cycle."""
    errors: list[SpecError] = []
    # A waits for B when A.start_after names a label B carries.
    component = _components(waits, waits, carriers)
    members: dict[int, set[str]] = {}
    for ep, comp in component.items():
        members.setdefault(comp, set()).add(ep)
    reported: set[frozenset[str]] = set()
    # A component where each connector waits for exactly one other of it is one simple
    # cycle (a ring): reported once, not searched again from each of its members.
    simple: dict[int, bool] = {}
    for start in waits:
        comp = component[start]
        group = members[comp]
        if not any(nxt in group for _, nxt in _edges(start, waits, carriers)):
            continue  # no cycle runs through it
        if simple.get(comp):
            continue
        if comp not in simple:
            simple[comp] = all(
                sum(nxt in group for _, nxt in _edges(ep, waits, carriers)) == 1 for ep in group
            )
        cycle = _find_cycle(start, waits, carriers, group)
        if cycle and frozenset(ep for ep, _ in cycle) not in reported:
            reported.add(frozenset(ep for ep, _ in cycle))
            errors.append(
                SpecError(
                    path_str([*where[cycle[0][0]], "start_after"]),
                    f"cyclic 'start_after' dependency: {_describe_cycle(cycle)}; remove one of these labels or start_after entries",
                )
            )
    return errors


def _describe_cycle(cycle: list[tuple[str, str]]) -> str:
    """``a.x waits for label 'l' carried by b.y, which waits for label ...``."""
    return "".join(
        f"{'' if i == 0 else ', which '}{ep if i == 0 else ''}{' ' if i == 0 else ''}waits for label {label!r} carried by {nxt}"
        for i, ((ep, label), (nxt, _)) in enumerate(zip(cycle, cycle[1:] + cycle[:1], strict=True))
    )


def _edges(
    ep: str, waits: Mapping[str, tuple[str, ...]], carriers: Mapping[str, list[str]]
) -> Iterator[tuple[str, str]]:
    """(label, endpoint carrying it) for each label ``ep`` waits for."""
    for label in waits.get(ep, ()):
        for nxt in carriers.get(label, []):
            yield label, nxt


def _find_cycle(
    start: str,
    waits: Mapping[str, tuple[str, ...]],
    carriers: Mapping[str, list[str]],
    within: Container[str] | None = None,
) -> list[tuple[str, str]] | None:
    """A cycle through ``start`` as [(endpoint, label it waits for), ...], or None.

    Depth-first with an explicit stack (a start_after chain of thousands of connectors
    must not exhaust Python's call stack); ``within`` limits the walk to ``start``'s
    strongly connected component, the only place a cycle through it can be."""
    path: list[tuple[str, str]] = []
    seen: set[str] = set()
    frames = [(start, _edges(start, waits, carriers))]
    while frames:
        ep, edges = frames[-1]
        for label, nxt in edges:
            if nxt == start:
                return [*path, (ep, label)]
            if nxt not in seen and (within is None or nxt in within):
                seen.add(nxt)
                path.append((ep, label))
                frames.append((nxt, _edges(nxt, waits, carriers)))
                break
        else:
            frames.pop()
            if path:
                path.pop()
    return None


def _components(
    nodes: Iterable[str],
    waits: Mapping[str, tuple[str, ...]],
    carriers: Mapping[str, list[str]],
) -> dict[str, int]:
    """Tarjan's strongly connected components, iteratively: endpoint -> component id."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    component: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    counter = 0
    for root in nodes:
        if root in index:
            continue
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        frames = [(root, _edges(root, waits, carriers))]
        while frames:
            ep, edges = frames[-1]
            for _, nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    frames.append((nxt, _edges(nxt, waits, carriers)))
                    break
                if nxt in on_stack:
                    low[ep] = min(low[ep], index[nxt])
            else:
                frames.pop()
                if frames:
                    parent = frames[-1][0]
                    low[parent] = min(low[parent], low[ep])
                if low[ep] == index[ep]:
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component[member] = index[ep]
                        if member == ep:
                            break
    return component
