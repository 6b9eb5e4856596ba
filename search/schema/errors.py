"""The one error body of every non-2xx answer (``search.api.app`` writes it, ``search.api.openapi`` declares it,
``search.client`` reads it into typed exceptions)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class ErrorBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    code: str = Field(description="Stable machine-readable code, e.g. invalid_request, not_found, budget_exhausted")
    message: str = Field(description="What went wrong and what to do about it, for a person or an agent")
    details: dict[str, Any] = Field(description="Structured context: the field, the valid values, the limits")


class ErrorResponse(BaseModel):
    """The one error shape of every non-2xx answer."""

    model_config = ConfigDict(extra="forbid")

    error: ErrorBody
