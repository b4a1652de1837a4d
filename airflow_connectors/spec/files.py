"""Reading spec files: YAML, JSON or Feldera SQL, as UTF-8 text, into the document that
validation checks. Problems a parser would hide are reported: a key given twice (YAML and
JSON keep the last one silently), bytes that are not UTF-8, nesting too deep to read.
YAML is read with 1.2 booleans, so ``on``/``off``/``yes``/``no`` stay strings."""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow_connectors.spec.errors import SpecError, SpecValidationError, path_str


@dataclass(frozen=True)
class SpecFile:
    """A spec file's document, ready for validation."""

    doc: Any
    #: The pipeline name to use instead of the document's ``pipeline`` (None: the
    #: document's).
    pipeline: str | None
    #: The file's folder: relative paths in transport configs are taken from it.
    base_dir: Path
    #: The file as named by the caller, for error messages.
    source: str
    #: Problems found while reading (duplicate keys), reported with the document's.
    problems: list[SpecError]


def read_spec_file(path: str | Path, *, pipeline: str | None = None) -> SpecFile:
    """Read a ``.yaml``/``.yml``/``.json`` spec or a ``.sql`` file of CREATE TABLE
    statements (pipeline name = file stem unless ``pipeline`` is given). Raises
    :class:`SpecValidationError` when the file cannot be read or parsed."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise SpecValidationError(
            [SpecError("", f"cannot read spec file: {e.strerror}")], str(p)
        ) from e
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SpecValidationError(
            [
                SpecError(
                    "",
                    f"the spec file must be UTF-8 text, but byte 0x{data[e.start]:02x} at byte "
                    f"offset {e.start} is not valid UTF-8; save the file as UTF-8",
                )
            ],
            str(p),
        ) from None
    doc: Any
    duplicates: list[SpecError] = []
    try:
        if p.suffix.lower() == ".sql":
            doc = {"pipeline": pipeline or p.stem, "sql": text}
            pipeline = None
        elif p.suffix.lower() == ".json":
            try:
                from airflow_connectors.spec.sql import unique_keys

                keys: list[str] = []
                doc = json.loads(text, object_pairs_hook=unique_keys(keys))
            except json.JSONDecodeError as e:
                raise SpecValidationError(
                    [SpecError("", f"invalid JSON at line {e.lineno}, column {e.colno}: {e.msg}")],
                    str(p),
                ) from e
            duplicates = [
                SpecError(
                    "",
                    f"duplicate key {key!r} in a JSON object; JSON keeps only the last one and "
                    "drops the first: merge them or rename one",
                )
                for key in keys
            ]
        else:
            import yaml

            try:
                doc, duplicates = _load_yaml(text)
            except yaml.YAMLError as e:
                raise SpecValidationError([SpecError("", f"invalid YAML: {e}")], str(p)) from e
    except RecursionError:
        raise SpecValidationError(
            [SpecError("", "the spec nests lists or mappings too deeply to be read")], str(p)
        ) from None
    return SpecFile(doc, pipeline, p.resolve().parent, str(p), duplicates)


def _load_yaml(text: str) -> tuple[Any, list[SpecError]]:
    """The YAML document and its duplicate keys (PyYAML would silently keep the last).

    Read with libyaml's parser when PyYAML has it (five times faster: a DAG file renders
    its spec on every parse); a document it rejects is read again by the pure-Python
    parser, whose messages quote the offending line."""
    import yaml

    fast, pure = _yaml_loaders()
    if fast is None:
        return _load_yaml_with(pure, text)
    try:
        return _load_yaml_with(fast, text)
    except yaml.YAMLError:
        return _load_yaml_with(pure, text)


def _load_yaml_with(loader_class: Any, text: str) -> tuple[Any, list[SpecError]]:
    loader = loader_class(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, []
        duplicates = _duplicate_keys(loader, node)
        return loader.construct_document(node), duplicates
    finally:
        loader.dispose()


def _duplicate_keys(loader: Any, root: Any) -> list[SpecError]:
    """A key given twice in one mapping, with its JSON path and both lines. Iterative:
    a deeply nested document must not exhaust the call stack."""
    import yaml

    found: list[tuple[int, SpecError]] = []  # (line, error)
    seen_nodes: set[int] = set()
    todo: list[tuple[Any, list[str | int]]] = [(root, [])]
    while todo:
        node, path = todo.pop()
        if id(node) in seen_nodes:  # an alias of a node already checked
            continue
        seen_nodes.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            todo.extend((child, [*path, i]) for i, child in enumerate(node.value))
        elif isinstance(node, yaml.MappingNode):
            first: dict[Any, Any] = {}
            for key_node, value_node in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # `<<: *base` may be overridden by the keys beside it
                key: Any = key_node.value
                if isinstance(key_node, yaml.ScalarNode):
                    key = loader.construct_object(key_node)
                todo.append((value_node, [*path, str(key)]))
                try:
                    earlier = first.setdefault(key, key_node)
                except TypeError:  # an unhashable (complex) key: PyYAML rejects it
                    continue
                if earlier is not key_node:
                    line = key_node.start_mark.line + 1
                    found.append(
                        (
                            line,
                            SpecError(
                                path_str([*path, str(key)]),
                                f"duplicate key {key!r} at line {line} (first at line "
                                f"{earlier.start_mark.line + 1}); YAML keeps only the last one "
                                "and drops the first: merge them or rename one",
                            ),
                        )
                    )
    return [error for _, error in sorted(found, key=lambda f: f[0])]


@functools.cache
def _yaml_loaders() -> tuple[Any, Any]:
    """(libyaml-backed loader or None when PyYAML was built without libyaml, pure-Python
    loader): safe loaders with YAML 1.2 booleans: only true/false are booleans, so keys
    and values such as ``on``, ``off``, ``yes`` and ``no`` stay strings (``trigger: {on:
    new_data}``).

    The libyaml one scans and parses in C but composes the nodes with PyYAML's Python
    composer: libyaml's own composer recurses in C without a depth check and crashes
    the interpreter on a document nested a hundred thousand deep, where Python's raises
    ``RecursionError`` (reported as one error). Both give the same nodes, with their
    lines, so duplicate keys are found and reported alike."""
    import yaml
    from yaml.composer import Composer

    resolvers = {
        first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }

    def with_yaml12_booleans(loader: Any) -> Any:
        loader.yaml_implicit_resolvers = {k: list(v) for k, v in resolvers.items()}
        loader.add_implicit_resolver(
            "tag:yaml.org,2002:bool",
            re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
            list("tTfF"),
        )
        return loader

    class Loader(yaml.SafeLoader):
        pass

    c_safe_loader: Any = getattr(yaml, "CSafeLoader", None)
    if c_safe_loader is None:
        return None, with_yaml12_booleans(Loader)

    class CLoader(Composer, c_safe_loader):  # type: ignore[misc]
        def __init__(self, stream: str) -> None:
            c_safe_loader.__init__(self, stream)
            Composer.__init__(self)

    return with_yaml12_booleans(CLoader), with_yaml12_booleans(Loader)
