"""The ``filter`` of ``delta_table_input``: a small SQL boolean expression, parsed once
(at validation) and evaluated with pyarrow compute on every record batch read.

Feldera evaluates ``filter`` with DataFusion (any SQL). Here no SQL engine is a runtime
dependency, so the supported subset is what maps one to one onto
:mod:`pyarrow.compute` expressions, with SQL's NULL rule (a row whose condition is NULL
is dropped):

- comparisons ``=``, ``<>``/``!=``, ``<``, ``<=``, ``>``, ``>=`` between a column and a
  literal (either side);
- ``col [NOT] IN (lit, ...)``, ``col [NOT] BETWEEN lit AND lit``,
  ``col IS [NOT] NULL``, a boolean column on its own;
- ``AND``, ``OR``, ``NOT`` and parentheses;
- literals: integers, decimals, ``'strings'`` (``''`` escapes a quote), ``TRUE``,
  ``FALSE``, ``DATE '2024-01-31'``, ``TIMESTAMP '2024-01-31 12:00:00'``.

Columns are bare names or ``"quoted"``; keywords are case-insensitive. A literal is cast
to its column's type when the batch is filtered (``ts >= '2024-01-01'`` works on a
timestamp column). Anything else (functions, arithmetic, LIKE, column-to-column
comparisons) is rejected when the config is validated, naming what is not supported.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.compute as pc

_TOKEN = re.compile(
    r"""\s*(?:
    (?P<num>-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)
    |(?P<str>'(?:[^']|'')*')
    |(?P<qid>"(?:[^"]|"")+")
    |(?P<id>[A-Za-z_][A-Za-z0-9_]*)
    |(?P<op><>|!=|<=|>=|=|<|>|\(|\)|,)
    )""",
    re.VERBOSE,
)
_KEYWORDS = {
    "AND",
    "OR",
    "NOT",
    "IN",
    "IS",
    "NULL",
    "TRUE",
    "FALSE",
    "BETWEEN",
    "DATE",
    "TIMESTAMP",
}
_FLIP = {"=": "=", "<>": "<>", "!=": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


class FilterError(ValueError):
    """The filter is not in the supported subset (one line, says what and where)."""


@dataclass(frozen=True)
class Literal:
    """A literal value; ``kind`` is ``date``/``timestamp`` for typed string literals."""

    value: Any
    kind: str = ""


@dataclass(frozen=True)
class Tok:
    kind: str  # num, str, id (identifier or keyword), qid, op, end
    text: str
    pos: int


def _tokens(text: str) -> list[Tok]:
    out: list[Tok] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            pos += len(text[pos:]) - len(text[pos:].lstrip())
            where = text[pos:][:20]
            if where[:1] in set("+-*/%|&^~"):
                raise FilterError(
                    f"operator {where[:1]!r} (position {pos + 1}) is not supported in a filter: "
                    "compare columns with literals (no arithmetic)"
                )
            raise FilterError(f"cannot read the filter at {where!r} (position {pos + 1})")
        kind = m.lastgroup or "op"
        out.append(Tok(kind, m.group(kind), m.start(kind)))
        pos = m.end()
    out.append(Tok("end", "", len(text)))
    return out


class _Parser:
    """Recursive descent: or -> and -> not -> predicate."""

    def __init__(self, text: str) -> None:
        self.toks = _tokens(text)
        self.i = 0

    @property
    def tok(self) -> Tok:
        return self.toks[self.i]

    def kw(self, *words: str) -> bool:
        t = self.tok
        return t.kind == "id" and t.text.upper() in words

    def take(self) -> Tok:
        t = self.tok
        self.i += 1
        return t

    def expect(self, what: str, ok: bool) -> Tok:
        if not ok:
            t = self.tok
            got = repr(t.text) if t.kind != "end" else "the end of the filter"
            raise FilterError(f"expected {what} at position {t.pos + 1}, found {got}")
        return self.take()

    def parse(self) -> tuple[Any, ...]:
        node = self.or_()
        self.expect("AND, OR or the end of the filter", self.tok.kind == "end")
        return node

    def or_(self) -> tuple[Any, ...]:
        node = self.and_()
        while self.kw("OR"):
            self.take()
            node = ("or", node, self.and_())
        return node

    def and_(self) -> tuple[Any, ...]:
        node = self.not_()
        while self.kw("AND"):
            self.take()
            node = ("and", node, self.not_())
        return node

    def not_(self) -> tuple[Any, ...]:
        if self.kw("NOT"):
            self.take()
            return ("not", self.not_())
        if self.tok.text == "(" and self.tok.kind == "op":
            self.take()
            node = self.or_()
            self.expect("')'", self.tok.text == ")")
            return node
        return self.predicate()

    def column(self) -> str | None:
        t = self.tok
        if t.kind == "qid":
            self.take()
            return t.text[1:-1].replace('""', '"')
        if t.kind == "id" and t.text.upper() not in _KEYWORDS:
            self.take()
            if self.tok.kind == "op" and self.tok.text == "(":
                raise FilterError(
                    f"function calls ({t.text}(...)) are not supported in a filter; compare "
                    "columns with literals"
                )
            return t.text
        return None

    def literal(self) -> Literal:
        t = self.tok
        if t.kind == "num":
            self.take()
            text = t.text
            return Literal(float(text) if any(c in text for c in ".eE") else int(text))
        if t.kind == "str":
            self.take()
            return Literal(t.text[1:-1].replace("''", "'"))
        if self.kw("TRUE", "FALSE"):
            return Literal(self.take().text.upper() == "TRUE")
        if self.kw("DATE", "TIMESTAMP"):
            kind = self.take().text.lower()
            s = self.expect(f"a quoted {kind} after {kind.upper()}", self.tok.kind == "str")
            return Literal(s.text[1:-1], kind)
        if self.kw("NULL"):
            raise FilterError(
                f"comparing with NULL (position {t.pos + 1}) is never true in SQL; write "
                "IS NULL or IS NOT NULL"
            )
        what = repr(t.text) if t.kind != "end" else "the end of the filter"
        raise FilterError(f"expected a literal at position {t.pos + 1}, found {what}")

    def membership(self, col: str) -> tuple[Any, ...]:
        """What follows ``col``: IS [NOT] NULL, [NOT] IN (...), [NOT] BETWEEN a AND b."""
        negate = False
        if self.kw("IS"):
            self.take()
            if self.kw("NOT"):
                self.take()
                negate = True
            self.expect("NULL after IS", self.kw("NULL"))
            return ("isnull", col, negate)
        if self.kw("NOT"):
            self.take()
            negate = True
            if not self.kw("IN", "BETWEEN"):
                self.expect("IN or BETWEEN after NOT", False)
        if self.kw("IN"):
            self.take()
            self.expect("'(' after IN", self.tok.text == "(")
            values = [self.literal()]
            while self.tok.text == ",":
                self.take()
                values.append(self.literal())
            self.expect("')' closing IN", self.tok.text == ")")
            return ("in", col, values, negate)
        if self.kw("BETWEEN"):
            self.take()
            lo = self.literal()
            self.expect("AND in BETWEEN", self.kw("AND"))
            hi = self.literal()
            return ("between", col, lo, hi, negate)
        self.expect("IN or BETWEEN", False)
        raise AssertionError("unreachable")

    def predicate(self) -> tuple[Any, ...]:
        start = self.tok
        col = self.column()
        if col is None:  # literal <op> column
            lit = self.literal()
            op = self.expect("a comparison operator", self.tok.text in _FLIP).text
            other = self.column()
            if other is None:
                raise FilterError(
                    f"a comparison needs a column on one side (position {start.pos + 1})"
                )
            return ("cmp", _FLIP[op], other, lit)
        if self.kw("IS", "NOT", "IN", "BETWEEN"):
            return self.membership(col)
        if self.tok.kind == "op" and self.tok.text in _FLIP:
            text = self.take().text
            op = "<>" if text == "!=" else text
            if self.column() is not None:
                raise FilterError(
                    "comparing two columns is not supported in a filter; compare a column "
                    "with a literal"
                )
            return ("cmp", op, col, self.literal())
        if self.tok.kind in ("end",) or self.kw("AND", "OR") or self.tok.text == ")":
            return ("bool", col)
        t = self.tok
        raise FilterError(
            f"{t.text!r} at position {t.pos + 1} is not supported in a filter (supported: "
            "comparisons, IN, BETWEEN, IS NULL, AND, OR, NOT with literals)"
        )


def parse(text: str) -> tuple[Any, ...]:
    """The filter as a syntax tree; raises :class:`FilterError` in one line."""
    if not text.strip():
        raise FilterError("the filter is empty; remove it to read every row")
    return _Parser(text).parse()


def columns(tree: tuple[Any, ...]) -> set[str]:
    """The column names ``tree`` reads."""
    if tree[0] in ("and", "or"):
        return columns(tree[1]) | columns(tree[2])
    if tree[0] == "not":
        return columns(tree[1])
    return {tree[1] if tree[0] != "cmp" else tree[2]}


def _timestamp(text: str, to: pa.DataType) -> pa.Scalar:
    """An ISO 8601 text as a timestamp scalar: with an offset it is that instant; without
    one it is wall-clock time in UTC (or naive, for a column without a time zone)."""
    import datetime as dt

    import pyarrow as pa

    value = dt.datetime.fromisoformat(text.strip())
    zone = getattr(to, "tz", None) if pa.types.is_timestamp(to) else None
    if value.tzinfo is not None and not zone:
        value = value.astimezone(dt.UTC).replace(tzinfo=None)
    elif value.tzinfo is None and zone:
        value = value.replace(tzinfo=dt.UTC)
    return pa.scalar(value, pa.timestamp("us", "UTC" if zone else None))


def _scalar(lit: Literal, to: pa.DataType, col: str) -> pa.Scalar:
    import pyarrow as pa

    value = lit.value
    try:
        if lit.kind == "date":
            scalar = pa.scalar(value).cast(pa.date32())
        elif lit.kind == "timestamp" or (pa.types.is_timestamp(to) and isinstance(value, str)):
            scalar = _timestamp(value, to)
        else:
            scalar = pa.scalar(value)
            number = isinstance(value, int | float) and not isinstance(value, bool)
            if number and (pa.types.is_integer(to) or pa.types.is_floating(to)):
                return scalar  # compute compares mixed numbers exactly (2.5 vs BIGINT)
        return scalar.cast(to) if not pa.types.is_null(to) else scalar
    except (ValueError, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        raise FilterError(
            f"filter: the literal {lit.value!r} cannot be compared with column {col!r} of "
            f"type {to} ({str(e).splitlines()[0]})"
        ) from e


def expression(tree: tuple[Any, ...], schema: pa.Schema) -> pc.Expression:
    """``tree`` as a pyarrow compute expression over ``schema`` (literals cast to their
    columns' types)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    op = tree[0]
    if op == "and":
        return expression(tree[1], schema) & expression(tree[2], schema)
    if op == "or":
        return expression(tree[1], schema) | expression(tree[2], schema)
    if op == "not":
        return ~expression(tree[1], schema)
    if op == "cmp":
        _, cmp, col, lit = tree
        field, value = pc.field(col), _scalar(lit, schema.field(col).type, col)
        return {
            "=": field == value,
            "<>": field != value,
            "<": field < value,
            "<=": field <= value,
            ">": field > value,
            ">=": field >= value,
        }[cmp]
    if op == "isnull":
        test = pc.field(tree[1]).is_null()
        return ~test if tree[2] else test
    if op == "in":
        _, col, values, negate = tree
        to = schema.field(col).type
        array = pa.array([_scalar(v, to, col).as_py() for v in values], to)
        f = pc.field(col)
        test = f.isin(array)
        # SQL: NULL [NOT] IN (...) is NULL (isin says false).
        return pc.if_else(f.is_null(), pa.scalar(None, pa.bool_()), ~test if negate else test)
    if op == "between":
        _, col, lo, hi, negate = tree
        to = schema.field(col).type
        f = pc.field(col)
        test = (f >= _scalar(lo, to, col)) & (f <= _scalar(hi, to, col))
        return ~test if negate else test
    return pc.field(tree[1]) == True  # noqa: E712 - a boolean column on its own
