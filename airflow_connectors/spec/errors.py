"""The errors of spec validation: each problem carries the JSON path of the field and a
message a user can act on (what was expected, a did-you-mean, what to do), and all of a
spec's problems are reported at once."""

from __future__ import annotations

import difflib
import json
import re
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from airflow_connectors.spec.config import field_order
from airflow_connectors.spec.redact import is_secret_name, mask_url

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class SpecError:
    """One problem: the JSON path of the field (``tables.t.connectors[0].name``) and
    what to do about it."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class SpecValidationError(ValueError):
    """Every problem found in a spec; ``str()`` gives one per line."""

    def __init__(self, errors: list[SpecError], source: str | None = None) -> None:
        self.errors = errors
        self.source = source
        head = f"{source}: " if source else ""
        super().__init__(
            f"{head}{len(errors)} problem(s) in pipeline spec:\n"
            + "\n".join(str(e) for e in errors)
        )


def path_str(parts: Iterable[str | int]) -> str:
    """``tables.t.connectors[0].name``; a key that is empty or holds spaces or control
    characters is quoted (``tables["t\\n"]``) so that an error stays one line."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif not _PLAIN_KEY.fullmatch(part):
            out += f"[{json.dumps(part)}]"
        else:
            out += f".{part}" if out else str(part)
    return out


_PLAIN_KEY = re.compile(r"[^\s\x00-\x1f\x7f\[\]\"]+")


def _error(errors: list[SpecError], path: Sequence[str | int], message: str) -> None:
    errors.append(SpecError(path_str(path), message))


def validated(
    path: Sequence[str | int], cls: type[M], doc: Any, errors: list[SpecError]
) -> M | None:
    """``doc`` validated as ``cls``, or None with each problem appended to ``errors`` at
    its JSON path below ``path``: pydantic's messages, reworded for users (unknown
    fields with a did-you-mean and the allowed ones)."""
    try:
        return cls.model_validate(doc)
    except ValidationError as exc:
        for err in exc.errors(include_url=False):
            loc = list(err["loc"])
            if err["type"] == "extra_forbidden":
                allowed = _fields_at(cls, loc[:-1])
                _error(errors, [*path, *loc], unknown_field(str(loc[-1]), allowed))
            elif err["type"] == "missing":
                _error(errors, [*path, *loc], "required field is missing")
            else:
                msg = err["msg"].removeprefix("Value error, ")
                got = err.get("input")
                secret = bool(loc) and is_secret_name(str(loc[-1]))
                shown = (
                    ""
                    if isinstance(got, Mapping | list) or repr(got) in msg or secret
                    else f" (got {mask_url(repr(got))})"  # a URL's password stays hidden
                )
                _error(errors, [*path, *loc], f"{msg[0].lower()}{msg[1:]}{shown}")
        return None


def unknown_field(key: str, allowed: Sequence[str]) -> str:
    """The message for a key that is not a field, with a did-you-mean."""
    hint = did_you_mean(key, allowed)
    return f"unknown field {key!r}{hint}; allowed fields: {', '.join(allowed)}"


def did_you_mean(word: str, options: Sequence[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``options``, or nothing."""
    match = difflib.get_close_matches(word, list(options), n=1, cutoff=0.75)
    return f" (did you mean {match[0]!r}?)" if match else ""


def _fields_at(cls: type[BaseModel], loc: list[Any]) -> list[str]:
    """Field names of the model reached by following ``loc`` from ``cls``."""
    current: Any = cls
    for part in loc:
        if isinstance(part, int):
            continue
        model = _model_in(current)
        if model is None or part not in model.model_fields:
            return []
        current = model.model_fields[part].annotation
    model = _model_in(current)
    if model is None:
        return []
    fields = model.model_fields
    return [_spelled(f, fields[f]) for f in field_order(model) if not f.startswith("_")]


def _spelled(name: str, info: Any) -> str:
    """How users write a field: its (first) validation alias, such as Kafka Connect's
    dotted ``retry.timeout``, else its name."""
    alias = info.validation_alias
    if isinstance(alias, str):
        return alias
    choices = getattr(alias, "choices", None)
    if choices and isinstance(choices[0], str):
        return str(choices[0])
    return name


def _model_in(tp: Any) -> type[BaseModel] | None:
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return tp
    for arg in typing.get_args(tp):
        found = _model_in(arg)
        if found is not None:
            return found
    if isinstance(tp, types.UnionType):
        return None
    return None


def describe(value: Any) -> str:
    """What a user wrote, for "expected ..., got ..." messages."""
    if value is None:
        return "nothing"
    return {
        dict: "a mapping",
        list: "a list",
        str: f"the string {value!r}",
        bool: f"the boolean {value}",
        int: f"the number {value}",
        float: f"the number {value}",
    }.get(type(value), type(value).__name__)
