"""The one base model of everything a user writes in a spec: the spec models themselves
and the configs of transports, formats and sinks. Plugins derive their ``Config`` from it,
so every config is immutable and rejects unknown keys (with a did-you-mean at validation).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictConfig(BaseModel):
    """Base for spec models and transport, format and sink configs: immutable, unknown
    keys rejected."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def field_order(model: type[BaseModel]) -> list[str]:
    """``model``'s field names as a user should read them: the fields the class itself
    declares first, in their order, then those it inherits (a source's ``bucket_name``
    before the listing settings and credentials every source shares). Pydantic lists
    inherited fields first."""
    own = [n for n in vars(model).get("__annotations__", {}) if n in model.model_fields]
    return own + [n for n in model.model_fields if n not in own]
