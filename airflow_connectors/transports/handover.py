"""The hand-over from a backfill to a stream: where a stream connector starts so that,
with the rows a backfill connector of the same table landed, every record lands once.

A stream connector with ``handover: {column: c}`` (``kafka_input``) and a
``start_after`` label on the backfill starts, at its first discovery, after the greatest
value of ``c`` the table holds then (what the backfill landed): per partition at the
first message whose ``c`` is greater. The engine looks the value up (the table's sink,
``Sink.column_max``) and hands it over as :class:`Handover` in ``SourceContext.handover``;
this module holds the search a transport runs over a partition's messages.

**Contract** (the one ``postgres_input``'s incremental cursor already asks): ``c``
grows in the order rows become visible in the database (one writer, or a commit-ordered
id) and in the message order of each partition. Under it there is no gap and no overlap.
An empty table (nothing backfilled) starts from ``start_from``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Handover:
    """The value a stream connector starts after, set by the engine's discovery."""

    #: The column (a field of each message's value).
    column: str
    #: Its greatest value in the table; None: nothing to hand over from (the table is
    #: empty, or the connector committed offsets already and starts from those).
    value: Any = None


#: One readable message at or after an offset: ``(its offset, its column value)``, or
#: None when the partition holds no message at or after it.
Probe = Callable[[int], "tuple[int, Any] | None"]


def first_after(probe: Probe, first: int, end: int, value: Any) -> int:
    """The first offset in ``first..end - 1`` whose message's column is greater than
    ``value`` (``end`` when none is), by binary search with ``probe``: messages grow in
    the column, and offsets without a message (holes) are skipped by the probe."""
    lo, hi = first, end
    while lo < hi:
        mid = (lo + hi) // 2
        found = probe(mid)
        if found is None or found[0] >= hi:
            hi = mid
        elif found[1] > value:
            hi = mid  # the offsets mid..found[0] - 1 are holes
        else:
            lo = found[0] + 1
    return lo


__all__ = ["Handover", "Probe", "first_after"]
