"""Secrets at rest: inline secrets of a config are stored encrypted ("sealed"), never in
clear.

A connector's configs travel outside the process that read the spec: into Airflow's
serialized DAG (operator and trigger arguments) and into the state store (each batch
plan keeps the config it was planned with). Before they are written there, every secret
value (what :mod:`.redact` masks: fields named or marked secret, URLs with a password or
a secret query parameter) is replaced by ``sealed:v1:<AES-SIV ciphertext>``
(deterministic, so a DAG file parsed again serializes the same DAG; the cipher's key is
derived from the Fernet key); validating a
spec or a plan turns sealed values back into the secret, in memory only.

The key is Airflow's: ``[connectors] secrets_key`` (``AIRFLOW__CONNECTORS__SECRETS_KEY``)
if set, else Airflow's ``[core] fernet_key`` (``AIRFLOW__CORE__FERNET_KEY`` or
``airflow.cfg``; a comma-separated list rotates keys: the first encrypts, all decrypt),
else, without Airflow (the embedded CLI), a key made once in
``$AIRFLOW_HOME/connectors/secrets.key`` (mode 0600). Every process that reads a sealed
value (dag-processor, workers, triggerer, Spark drivers) must see the same key; the
message says so when one does not. Values holding Jinja (``{{ ... }}``) are templates,
not secrets, and stay as written. Pure: no Airflow, no Spark.
"""

from __future__ import annotations

import configparser
import os
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any

from airflow_connectors.spec.redact import is_secret_name, mask_url

#: What a sealed value starts with.
PREFIX = "sealed:v1:"


class SealedValueError(ValueError):
    """A sealed value that this process cannot open (another key, or a damaged value)."""


def _airflow_home() -> Path:
    return Path(os.environ.get("AIRFLOW_HOME") or Path.home() / "airflow").expanduser()


def _configured() -> str | None:
    """The key from the environment or ``airflow.cfg`` (None: none configured)."""
    for var in ("AIRFLOW__CONNECTORS__SECRETS_KEY", "AIRFLOW__CORE__FERNET_KEY"):
        if os.environ.get(var, "").strip():
            return os.environ[var]
    cfg = Path(os.environ.get("AIRFLOW_CONFIG") or _airflow_home() / "airflow.cfg")
    try:
        stamp = cfg.stat().st_mtime_ns
    except OSError:
        return None
    return _from_config_file(str(cfg), stamp)


@lru_cache(maxsize=4)
def _from_config_file(path: str, stamp: int) -> str | None:
    """The key in an ``airflow.cfg`` (read once per version of the file: rendering many
    connectors with secrets seals many values)."""
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(path)
    except configparser.Error:
        return None
    for section, option in (("connectors", "secrets_key"), ("core", "fernet_key")):
        if parser.has_option(section, option) and parser.get(section, option).strip():
            return parser.get(section, option)
    return None


def _key_file() -> Path:
    return _airflow_home() / "connectors" / "secrets.key"


def _file_key(create: bool) -> str | None:
    """The embedded key file's key, made (0600) when ``create`` and missing."""
    from cryptography.fernet import Fernet

    path = _key_file()
    if path.is_file():
        return path.read_text().strip() or None
    if not create:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(Fernet.generate_key().decode())
    return path.read_text().strip()


@lru_cache(maxsize=8)
def _ciphers(keys: str) -> list[Any]:
    """One AES-SIV cipher per configured key, the first one sealing. AES-SIV is
    deterministic: the same secret seals to the same text, so a DAG file parsed again
    serializes the same DAG (Airflow keeps one version and keeps its triggers), while
    the text still reveals nothing of the secret. Each cipher's key is derived (HKDF) from
    the Fernet key, so no second key needs configuring."""
    import base64

    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.ciphers.aead import AESSIV
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    ciphers = []
    for key in (k.strip() for k in keys.split(",")):
        if not key:
            continue
        try:
            raw = base64.urlsafe_b64decode(key.encode())
            if len(raw) != 32:
                raise ValueError("Fernet key must be 32 url-safe base64-encoded bytes.")
        except (ValueError, TypeError) as e:
            raise SealedValueError(
                "the key for secrets at rest ([connectors] secrets_key or [core] fernet_key) "
                f"is not a Fernet key ({e}); generate one with `python -c 'from "
                "cryptography.fernet import Fernet; print(Fernet.generate_key().decode())'`"
            ) from None
        derived = HKDF(
            algorithm=hashes.SHA256(), length=64, salt=None, info=b"airflow-connectors sealed v1"
        ).derive(raw)
        ciphers.append(AESSIV(derived))
    if not ciphers:
        raise SealedValueError("the key for secrets at rest is empty")
    return ciphers


def _where() -> str:
    return (
        "AIRFLOW__CONNECTORS__SECRETS_KEY or AIRFLOW__CORE__FERNET_KEY (or [core] fernet_key "
        f"in airflow.cfg), else {_key_file()}"
    )


def seal_value(value: str) -> str:
    """``value`` encrypted with the first key (made for the embedded CLI if none)."""
    import base64

    keys = _configured() or _file_key(create=True)
    assert keys is not None
    sealed: bytes = _ciphers(keys)[0].encrypt(value.encode(), None)
    return PREFIX + base64.urlsafe_b64encode(sealed).decode()


def unseal_value(value: str) -> str:
    """The secret a sealed ``value`` holds; ``value`` itself when it is not sealed."""
    if not value.startswith(PREFIX):
        return value
    import base64
    import binascii

    from cryptography.exceptions import InvalidTag

    keys = _configured() or _file_key(create=False)
    if keys is None:
        raise SealedValueError(
            "a secret of this config was stored encrypted, but this process has no key to "
            f"open it; give every Airflow component (and the Spark driver) the same key: "
            f"{_where()}"
        )
    try:
        data = base64.urlsafe_b64decode(value[len(PREFIX) :].encode())
    except (binascii.Error, ValueError):
        data = b""
    for cipher in _ciphers(keys):
        try:
            return str(cipher.decrypt(data, None).decode())
        except (InvalidTag, ValueError):
            continue
    raise SealedValueError(
        "a secret of this config was stored encrypted with another key than this "
        f"process has; give every Airflow component (and the Spark driver) the same key "
        f"({_where()}), or keep the old key listed after the new one"
    )


def _secret_string(key: str, value: str, names: frozenset[str]) -> bool:
    if not value or "{{" in value or "{%" in value or value.startswith(PREFIX):
        return False
    if key and (key in names or is_secret_name(key)):
        return True
    return mask_url(value) != value  # a URL with a password or a secret query parameter


def seal(value: Any, secret: Iterable[str] = (), _key: str = "") -> Any:
    """A copy of a config (nested dicts and lists) with every secret value sealed: the
    values :func:`.redact.mask_config` would mask (``secret`` adds field names a config
    model marks secret)."""
    names = secret if isinstance(secret, frozenset) else frozenset(secret)
    if isinstance(value, dict):
        return {k: seal(v, names, str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [seal(v, names, _key) for v in value]
    if isinstance(value, str) and _secret_string(_key, value, names):
        return seal_value(value)
    return value


def unseal(value: Any, *, unopened: str | None = None) -> Any:
    """A copy of a config with every sealed value opened (see :func:`unseal_value`).
    ``unopened``: what a value this process cannot open becomes, instead of raising
    :class:`SealedValueError` (for display, where it is masked anyway)."""
    if isinstance(value, dict):
        return {k: unseal(v, unopened=unopened) for k, v in value.items()}
    if isinstance(value, list):
        return [unseal(v, unopened=unopened) for v in value]
    if isinstance(value, str) and value.startswith(PREFIX):
        try:
            return unseal_value(value)
        except SealedValueError:
            if unopened is None:
                raise
            return unopened
    return value


def is_sealed(value: Any) -> bool:
    """Whether a config holds a sealed value anywhere."""
    if isinstance(value, dict):
        return any(is_sealed(v) for v in value.values())
    if isinstance(value, list):
        return any(is_sealed(v) for v in value)
    return isinstance(value, str) and value.startswith(PREFIX)
