"""How a failure is told and whether retrying it can help: one line for logs and
surfaces, permanent (bad input or setting: fail at once) or transient (retry)."""

from __future__ import annotations

from airflow_connectors.settings import SettingsError

#: Errors that the same attempt again would meet again: a missing bucket, object or
#: connection, refused credentials, a config or spec that is not valid, keys out of
#: order. Retrying them only delays the failure.
PERMANENT: tuple[type[BaseException], ...] = (
    PermissionError,
    FileNotFoundError,
    NotADirectoryError,
    IsADirectoryError,
    ValueError,  # bad settings and input (SpecValidationError, SourceOrderError, ...)
    TypeError,
    LookupError,  # a connection nobody knows or that cannot be read (ConnectionProblem)
    SettingsError,
)

#: Errors another attempt may not meet: the network, a timeout, a busy server.
TRANSIENT: tuple[type[BaseException], ...] = (ConnectionError, TimeoutError)


def is_permanent(error: BaseException) -> bool:
    """Whether retrying the attempt that raised ``error`` cannot help (see
    :data:`PERMANENT`); unknown errors count as transient."""
    if isinstance(error, TRANSIENT):
        return False
    return isinstance(error, PERMANENT)  # a ConnectionProblem is a LookupError


def one_line(error: BaseException) -> str:
    """``error``'s message on one line (its lines joined with "; "), or its type's name
    when it has none."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return "; ".join(lines) if lines else type(error).__name__
