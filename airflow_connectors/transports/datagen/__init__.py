"""``datagen``: generated rows, with the config shape of Feldera's ``datagen`` transport.

A config is a list of plans that run one after another. Each plan generates ``limit``
rows (forever when unset), at most ``rate`` rows per second, with a strategy per column:
``increment``, ``uniform`` or ``zipf``, over a ``range`` or a list of ``values``, with an
optional share of NULLs.

A row is a pure function of (seed, plan, column, row index): values are generated in
aligned chunks of :data:`GEN_CHUNK_ROWS` rows, each chunk from its own random generator,
then sliced. Re-reading a work item after a failure, or splitting a plan into different
items, therefore yields the same rows, which is what makes a generated batch replayable.

Differences from Feldera: no ``seed`` means seed 0 (Feldera picks a random one, but a
replayed batch must regenerate the same rows); the string generators (``word``,
``email``...) and nested types are not supported; ``workers`` and ``transaction_size``
are accepted and ignored (Spark tasks parallelise reading, batches are transactions).

The package: :mod:`.config` (the config models), :mod:`.columns` (each column's settings
checked against its type), :mod:`.generation` (values of one chunk), :mod:`.transport`
(discovery and reading).
"""

from airflow_connectors.transports.datagen.columns import MAX_STRING_LENGTH, MAX_ZIPF_VALUES
from airflow_connectors.transports.datagen.config import (
    DEFAULT_ITEM_ROWS,
    DatagenConfig,
    FieldSettings,
    GenerationPlan,
)
from airflow_connectors.transports.datagen.generation import GEN_CHUNK_ROWS
from airflow_connectors.transports.datagen.transport import (
    UNBOUNDED_DISCOVERY_ROWS,
    DatagenTransport,
    plan_key,
)

__all__ = [
    "DEFAULT_ITEM_ROWS",
    "GEN_CHUNK_ROWS",
    "MAX_STRING_LENGTH",
    "MAX_ZIPF_VALUES",
    "UNBOUNDED_DISCOVERY_ROWS",
    "DatagenConfig",
    "DatagenTransport",
    "FieldSettings",
    "GenerationPlan",
    "plan_key",
]
