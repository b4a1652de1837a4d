"""Masking of secrets in configs, keys and messages: the one place that decides what a
user may see of a credential.

Secrets are: the password in a URL's userinfo (``http://reader:PASSWORD@host``), query
parameters named like a secret (``?token=...``, presigned ``X-Amz-Signature``), and every
config field named like one (password, passwd, secret, token, credential(s), auth,
``*_key`` / ``*_key_id`` such as ``api_key`` or ``aws_access_key_id``) or marked secret by
its config model (a ``SecretStr`` field, or ``Field(json_schema_extra={"secret": True})``).
Plain ``key`` (an object key) and ``*_column`` names are not secrets.

Everything shown to a user (REST answers, the UI, DAG docs, rendered template fields,
CLI output, logs, errors) goes through :func:`mask_config`, :func:`mask_url` or
:func:`mask_text`; the engine keeps the real values internally. Pure: no Airflow, no
Spark.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, SecretBytes, SecretStr

#: What a masked value is replaced with.
MASK = "***"

_SECRET_NAME = re.compile(
    r"pass(word|wd)?$|passphrase|secret|token|credential|^auth|_auth$|signature|"
    r"connection_?string|"
    # librdkafka's private key text and OAuth settings (ssl.key.pem, sasl.oauthbearer.config)
    r"(^|[._])key[._]pem$|oauthbearer[._]config$|"
    r"(^|_)(api|access|private|secret|signing|encryption|client|account|master|sas)_?key(_id)?$",
    re.I,
)
#: ``scheme://user:password@`` (the password part) in any text.
_USERINFO = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://[^:/?#@\s]*:)[^@/?#\s]+@")
#: ``?name=value`` / ``&name=value`` where name looks like a secret.
_QUERY = re.compile(r"(?P<head>[?&](?P<name>[A-Za-z0-9_.\-]+)=)(?P<value>[^&#\s\"']+)")


@functools.lru_cache(maxsize=4096)
def is_secret_name(name: str) -> bool:
    """Whether a config field or query parameter of this name holds a secret (cached:
    configs repeat a few field names thousands of times)."""
    return bool(_SECRET_NAME.search(name))


def is_secret_option(name: str) -> bool:
    """Whether a dotted client setting (librdkafka's ``sasl.password``,
    ``ssl.key.password``, ``sasl.oauthbearer.client.secret``, ``ssl.key.pem``...) holds
    a secret."""
    return is_secret_name(name) or is_secret_name(name.replace(".", "_"))


@functools.lru_cache(maxsize=256)
def secret_fields(model: type[BaseModel] | None) -> frozenset[str]:
    """Fields a config model marks secret: ``SecretStr``/``SecretBytes`` fields and those
    with ``json_schema_extra={"secret": True}`` (once per model: its fields are fixed)."""
    if model is None:
        return frozenset()
    found = set()
    for name, field in model.model_fields.items():
        extra = field.json_schema_extra
        if (isinstance(extra, dict) and extra.get("secret")) or field.annotation in (
            SecretStr,
            SecretBytes,
            SecretStr | None,
            SecretBytes | None,
        ):
            found.add(name)
            if field.alias:
                found.add(field.alias)
    return frozenset(found)


def mask_url(value: str) -> str:
    """``value`` with URL passwords and secret query parameters masked."""
    if "@" not in value and "=" not in value:
        return value  # neither a userinfo nor a query parameter (most values: paths, names)
    value = _USERINFO.sub(lambda m: m.group("head") + MASK + "@", value)
    return _QUERY.sub(
        lambda m: m.group("head") + MASK if is_secret_name(m.group("name")) else m.group(0),
        value,
    )


def mask_config(value: Any, secret: Iterable[str] = (), _key: str = "") -> Any:
    """A copy of a config (nested dicts/lists) with secret fields and URL passwords
    masked. ``secret`` adds field names a config model marks secret."""
    names = secret if isinstance(secret, frozenset) else frozenset(secret)
    if isinstance(value, dict):
        return {k: mask_config(v, names, str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [mask_config(v, names, _key) for v in value]
    if _key and (_key in names or is_secret_name(_key)) and value not in (None, ""):
        return MASK
    if isinstance(value, (SecretStr, SecretBytes)):
        return MASK
    if isinstance(value, str):
        return mask_url(value)
    return value


def secret_values(value: Any, secret: Iterable[str] = (), _key: str = "") -> set[str]:
    """Every secret string inside a config: values of secret fields and URL passwords,
    so that free text (an error from a library) can be scrubbed of them."""
    names = frozenset(secret)
    found: set[str] = set()
    if isinstance(value, dict):
        for k, v in value.items():
            found |= secret_values(v, names, str(k))
    elif isinstance(value, (list, tuple)):
        for v in value:
            found |= secret_values(v, names, _key)
    elif isinstance(value, (SecretStr, SecretBytes)):
        raw = value.get_secret_value()
        found.add(raw.decode(errors="replace") if isinstance(raw, bytes) else raw)
    elif isinstance(value, str):
        if _key and (_key in names or is_secret_name(_key)) and value:
            found.add(value)
        for m in _USERINFO.finditer(value):
            password = value[m.end("head") : m.end() - 1]
            found.add(password)
        for m in _QUERY.finditer(value):
            if is_secret_name(m.group("name")):
                found.add(m.group("value"))
    return {s for s in found if len(s) >= 3}


def mask_text(text: str, secrets: Iterable[str] = ()) -> str:
    """Free text (an error message, a trace, a log line) with URL passwords, secret query
    parameters and each of ``secrets`` masked."""
    for s in sorted(set(secrets), key=len, reverse=True):
        if s:
            text = text.replace(s, MASK)
    return mask_url(text)
