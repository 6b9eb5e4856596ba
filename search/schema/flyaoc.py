"""The submission report: FlyAOC's ``{valid, errors, annotation_count}`` plus flysift's warnings and structured issues
(``search.flyaoc.validation`` writes it, ``POST /v1/sessions/{id}/submission`` answers it)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class Issue(BaseModel):
    """One finding of the validator on one prediction object. ``suggestions`` holds replacement ids for obsolete
    terms."""

    path: str
    severity: Literal["error", "warning"]
    code: str
    message: str
    suggestions: list[str] = Field(default_factory=list)

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class AnnotationCount(BaseModel):
    task1_go_terms: int = 0
    task2_expression: int = 0
    task3_synonyms: int = Field(0, description="fullname + symbol synonyms")


class ValidationReport(BaseModel):
    """FlyAOC's ``{valid, errors, annotation_count}`` plus flysift's warnings and the structured issues."""

    valid: bool
    errors: list[str]
    warnings: list[str] = Field(default_factory=list)
    annotation_count: AnnotationCount
    issues: list[Issue] = Field(default_factory=list)
