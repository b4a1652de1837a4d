"""The ``datagen`` config, shaped as Feldera's ``DatagenInputConfig``: plans of rows
with per-column settings. Checked against the table's columns in :mod:`.columns`."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from airflow_connectors.spec.config import StrictConfig

#: Rows per work item when a plan sets no ``worker_chunk_size``.
DEFAULT_ITEM_ROWS = 100_000


class FieldSettings(StrictConfig):
    """How one column is generated (Feldera's ``RngFieldSettings``).

    ``range`` is half-open ``[a, b)``: numbers for numeric columns, lengths for VARCHAR
    (``uniform``/``zipf``; ``increment`` starts its numbers at ``a``), days or ISO dates
    for DATE, milliseconds or ISO timestamps for TIMESTAMP, milliseconds since midnight or
    ISO times for TIME; ignored for BOOLEAN. ``values`` overrides ``range``; ``[]`` gives
    NULLs. ``scale`` is the step of ``increment`` and ``uniform``; ``e`` is the zipf
    exponent.
    """

    strategy: Literal["increment", "uniform", "zipf"] = Field(
        default="increment",
        description="How values are drawn: 'increment' counts up from the start of "
        "`range` by `scale` per row (wrapping at its end), 'uniform' picks uniformly "
        "at random, 'zipf' favours small values (exponent `e`).",
    )
    range: tuple[Any, Any] | None = Field(
        default=None,
        description="Half-open [a, b): numbers for numeric columns, string lengths for "
        "VARCHAR, days or ISO dates for DATE, milliseconds or ISO timestamps for "
        "TIMESTAMP, milliseconds since midnight or ISO times for TIME; ignored for "
        "BOOLEAN. Unset: 'increment' counts up from 0 (from midnight for TIME); "
        "'uniform' and 'zipf' use the type's full width for integers, [0, 1) for floats "
        "and decimals (zipf on them needs a range), lengths 0-24 for strings, "
        "1970-01-01 to 2100-01-01 for dates and timestamps, the whole day for TIME.",
    )
    values: list[Any] | None = Field(
        default=None,
        description="Values to draw from instead of `range` (in turn for 'increment', "
        "at random for 'uniform' and 'zipf'); [] makes every value NULL.",
    )
    null_percentage: int | None = Field(
        default=None,
        ge=1,
        le=100,
        description="Percentage (1-100) of rows where the column is NULL, at random; "
        "unset: none. Only for nullable columns.",
    )
    scale: int = Field(
        default=1,
        ge=1,
        description="Step between values: 'increment' adds it per row (seconds for "
        "TIME), 'uniform' draws multiples of it from the start of `range`.",
    )
    e: float = Field(
        default=1.0,
        ge=0,
        description="Zipf exponent: the k-th value has weight 1/k^e; 0 is uniform, "
        "larger values concentrate on the first values.",
    )

    @field_validator("range")
    @classmethod
    def _non_empty(cls, value: tuple[Any, Any] | None) -> tuple[Any, Any] | None:
        # Numbers are checked here; ISO strings once the transport knows the column type.
        if value is not None and all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in value
        ):
            a, b = value
            if a >= b:
                raise ValueError(f"range [{a!r}, {b!r}) is empty: a must be below b")
        return value


class GenerationPlan(StrictConfig):
    """A stretch of rows: ``limit`` rows (unbounded when unset), at most ``rate`` rows
    per second, split into work items of ``worker_chunk_size`` rows."""

    rate: int | None = Field(
        default=None,
        gt=0,
        description="Most rows per second, counted from the connector's first discovery "
        "(each run generates what the elapsed time allows, at least one second's worth); "
        "unset: as fast as the runs go.",
    )
    limit: int | None = Field(
        default=None,
        ge=0,
        description="Rows this plan generates before the next plan starts; unset: "
        "unlimited (the connector never reaches end of input and later plans never run).",
    )
    worker_chunk_size: int | None = Field(
        default=None,
        gt=0,
        description=f"Rows per work item, i.e. per Spark task; unset: {DEFAULT_ITEM_ROWS:,}.",
    )
    fields: dict[str, FieldSettings] = Field(
        default_factory=dict,
        description="Per-column generation settings by column name (strategy, range, "
        "values, null_percentage, scale, e); a column not named counts up from 0 "
        "('increment').",
    )


class DatagenConfig(StrictConfig):
    """Feldera's ``DatagenInputConfig``: plans run in order; ``seed`` fixes the values."""

    plan: list[GenerationPlan] = Field(
        default_factory=lambda: [GenerationPlan()],
        description="Generation plans, run one after another: each generates `limit` "
        "rows (unlimited when unset) at most `rate` rows per second, with per-column "
        "settings in `fields`. Default: one unlimited plan of incrementing values.",
    )
    seed: int | None = Field(
        default=None,
        ge=0,
        description="Seed of the random values: the same seed and plans always generate "
        "the same rows. Unset: 0 (Feldera picks a random seed; here a replayed batch must "
        "regenerate the same rows).",
    )
    workers: int = Field(
        default=1,
        ge=1,
        description="Accepted for Feldera compatibility and ignored: Spark tasks "
        "parallelise generation (see `worker_chunk_size`).",
    )
    transaction_size: int | None = Field(
        default=None,
        gt=0,
        description="Accepted for Feldera compatibility and ignored: each batch is "
        "committed as one transaction.",
    )
