"""Column types: Feldera's SQL scalar types and their Arrow and Spark forms."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

#: Canonical type names, in the order error messages list them.
SUPPORTED_TYPES = (
    "BOOLEAN",
    "TINYINT",
    "SMALLINT",
    "INT",
    "BIGINT",
    "REAL",
    "DOUBLE",
    "DECIMAL(p,s)",
    "VARCHAR",
    "DATE",
    "TIME",
    "TIMESTAMP",
)

# sqlglot's type names -> ours. FLOAT is DOUBLE in Feldera (Calcite) and in sqlglot.
_FROM_SQLGLOT = {
    "BOOLEAN": "BOOLEAN",
    "TINYINT": "TINYINT",
    "SMALLINT": "SMALLINT",
    "INT": "INT",
    "BIGINT": "BIGINT",
    "FLOAT": "REAL",
    "DOUBLE": "DOUBLE",
    "DECIMAL": "DECIMAL",
    "VARCHAR": "VARCHAR",
    "CHAR": "VARCHAR",
    "NCHAR": "VARCHAR",
    "NVARCHAR": "VARCHAR",
    "TEXT": "VARCHAR",
    "DATE": "DATE",
    "TIME": "TIME",
    "TIMESTAMP": "TIMESTAMP",
}

INTEGER_TYPES = ("TINYINT", "SMALLINT", "INT", "BIGINT")
DEFAULT_DECIMAL = (28, 10)


@dataclass(frozen=True)
class SqlType:
    """A column's type. ``precision``/``scale`` are set for DECIMAL only."""

    kind: str
    precision: int | None = None
    scale: int | None = None

    def __str__(self) -> str:
        if self.kind == "DECIMAL":
            return f"DECIMAL({self.precision}, {self.scale})"
        return self.kind

    @property
    def is_integer(self) -> bool:
        """Whether the type is one of the SQL integer types (TINYINT to BIGINT)."""
        return self.kind in INTEGER_TYPES

    def arrow(self) -> pa.DataType:
        """The Arrow type formats decode this column into (TIMESTAMP has no time zone)."""
        import pyarrow as pa

        simple = {
            "BOOLEAN": pa.bool_(),
            "TINYINT": pa.int8(),
            "SMALLINT": pa.int16(),
            "INT": pa.int32(),
            "BIGINT": pa.int64(),
            "REAL": pa.float32(),
            "DOUBLE": pa.float64(),
            "VARCHAR": pa.string(),
            "DATE": pa.date32(),
            "TIME": pa.time64("us"),
            # Feldera's TIMESTAMP has no time zone: Spark's TIMESTAMP_NTZ.
            "TIMESTAMP": pa.timestamp("us"),
        }
        if self.kind == "DECIMAL":
            assert self.precision is not None and self.scale is not None
            return pa.decimal128(self.precision, self.scale)
        return simple[self.kind]

    def spark_ddl(self) -> str:
        """The type in Spark SQL DDL (VARCHAR is STRING, TIMESTAMP is TIMESTAMP_NTZ)."""
        if self.kind == "DECIMAL":
            return f"DECIMAL({self.precision},{self.scale})"
        return {
            "REAL": "FLOAT",
            "VARCHAR": "STRING",
            "TIMESTAMP": "TIMESTAMP_NTZ",
            "TIME": "TIME(6)",
        }.get(self.kind, self.kind)


#: Plain type names read without sqlglot (importing it takes a tenth of a second of
#: every run that parses a spec): what sqlglot's ``postgres`` reading makes of each
#: (``tests/spec/test_fast_paths.py`` holds them to it).
_SIMPLE_TYPES = {
    "BOOLEAN": "BOOLEAN",
    "BOOL": "BOOLEAN",
    "TINYINT": "TINYINT",
    "SMALLINT": "SMALLINT",
    "INT": "INT",
    "INTEGER": "INT",
    "BIGINT": "BIGINT",
    "REAL": "REAL",
    "DOUBLE": "DOUBLE",
    "VARCHAR": "VARCHAR",
    "TEXT": "VARCHAR",
    "DATE": "DATE",
    "TIME": "TIME",
    "TIMESTAMP": "TIMESTAMP",
}
_SIMPLE = re.compile(r"\s*([A-Za-z]+)(?:\s+(NOT\s+)?NULL)?\s*", re.IGNORECASE | re.ASCII)


@functools.lru_cache(maxsize=1024)
def parse_type(text: str) -> tuple[SqlType, bool]:
    """Parse ``"BIGINT NOT NULL"`` into (type, nullable). Raises ``ValueError`` with a
    message that lists the supported types. Once per text: the tables of a pipeline
    repeat a few types."""
    simple = _SIMPLE.fullmatch(text)
    if simple and simple.group(1).upper() in _SIMPLE_TYPES:
        return SqlType(_SIMPLE_TYPES[simple.group(1).upper()]), simple.group(2) is None
    return parse_type_with_sqlglot(text)


def parse_type_with_sqlglot(text: str) -> tuple[SqlType, bool]:
    """:func:`parse_type` by sqlglot's ``postgres`` reading, for every type text."""
    import sqlglot
    from sqlglot import exp
    from sqlglot.errors import ParseError

    try:
        create = sqlglot.parse_one(f"CREATE TABLE t (c {text})", read="postgres")
        col = create.this.expressions[0]
    except (ParseError, AttributeError, IndexError) as e:
        raise ValueError(
            f"cannot parse column type {text!r}; expected a SQL type such as "
            f"{', '.join(SUPPORTED_TYPES)}, optionally followed by NOT NULL"
        ) from e
    if not isinstance(col, exp.ColumnDef) or col.args.get("kind") is None:
        raise ValueError(
            f"cannot parse column type {text!r}; expected one of {', '.join(SUPPORTED_TYPES)}"
        )
    try:
        return from_column_def(col)
    except ValueError as e:
        if "unsupported column type" in str(e):
            raise ValueError(
                f"unsupported column type {text!r}; supported types: {', '.join(SUPPORTED_TYPES)}"
            ) from e
        raise


def from_column_def(col: object) -> tuple[SqlType, bool]:
    """Convert a sqlglot ``ColumnDef`` into (type, nullable)."""
    from sqlglot import exp

    assert isinstance(col, exp.ColumnDef)
    kind = col.args["kind"]
    name = kind.this.name if hasattr(kind.this, "name") else str(kind.this)
    ours = _FROM_SQLGLOT.get(name)
    if ours is None:
        raise ValueError(
            f"unsupported column type {kind.sql()!r}; supported types: {', '.join(SUPPORTED_TYPES)}"
        )
    params = (
        [
            int(e.this.this) if isinstance(e.this, exp.Literal) else int(e.sql())
            for e in kind.expressions
        ]
        if kind.expressions
        else []
    )
    sql_type = SqlType(ours)
    if ours == "DECIMAL":
        precision = params[0] if params else DEFAULT_DECIMAL[0]
        scale = params[1] if len(params) > 1 else (0 if params else DEFAULT_DECIMAL[1])
        if not 1 <= precision <= 38 or not 0 <= scale <= precision:
            raise ValueError(
                f"DECIMAL({precision}, {scale}) is out of range; precision must be 1..38 and scale 0..precision"
            )
        sql_type = SqlType("DECIMAL", precision, scale)
    nullable = True
    for constraint in col.constraints:
        if isinstance(constraint.kind, exp.NotNullColumnConstraint):
            nullable = bool(constraint.kind.args.get("allow_null"))
        elif isinstance(constraint.kind, exp.PrimaryKeyColumnConstraint):
            nullable = False
    return sql_type, nullable
