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
