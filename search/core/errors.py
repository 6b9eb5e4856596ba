"""One error type for the whole service; the API turns it into ``{"error": {"code", "message", "details"}}``."""

from __future__ import annotations

from typing import Any


class FlysiftError(Exception):
    """An error an agent or user can act on: a stable ``code``, a readable ``message`` and an HTTP status."""

    status = 400
    code = "bad_request"

    def __init__(self, message: str, *, code: str | None = None, status: int | None = None,
                 details: dict[str, Any] | None = None, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.message = message
        if code:
            self.code = code
        if status:
            self.status = status
        self.details = details or {}
        self.headers = headers or {}

    def to_dict(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message, "details": self.details}}


class NotFound(FlysiftError):
    status = 404
    code = "not_found"


class PaperNotFound(NotFound):
    """No paper with this pmcid in the collection (reading it still costs a unit under the ``flyaoc`` budget)."""


class InvalidRequest(FlysiftError):
    status = 422
    code = "invalid_request"


class InvalidJson(FlysiftError):
    """The body is not JSON at all (syntax, encoding, ``NaN``): nothing of it was read."""

    status = 400
    code = "invalid_json"


class PayloadTooLarge(FlysiftError):
    status = 413
    code = "body_too_large"


class LimitExceeded(FlysiftError):
    status = 422
    code = "limit_exceeded"


class Unavailable(FlysiftError):
    """The engine (e.g. the search cluster) cannot answer now; clients should retry later."""

    status = 503
    code = "unavailable"

    def __init__(self, message: str, *, retry_after: int = 5, **kw: Any):
        super().__init__(message, **kw)
        self.headers.setdefault("Retry-After", str(retry_after))


class IndexMissing(FlysiftError):
    """No published index: the service is not ready yet (index, then retry). Engines raise it through
    ``search.core.names.index_missing``."""

    status = 503
    code = "index_missing"


class CollectionNotFound(IndexMissing):
    """A named collection without a published index does not exist: 404 ``not_found`` (like any unknown name), which
    no retry changes; ``details.field`` is ``collection``."""

    status = 404
    code = "not_found"

    def __init__(self, message: str, **kw: Any):
        super().__init__(message, **kw)
        self.details = {"field": "collection", **self.details}


class InputError(FlysiftError):
    """Bad input record; carries where it came from so the rejects report can name file, record and field."""

    code = "bad_input"

    def __init__(self, message: str, *, source: str | None = None, record: int | None = None,
                 field: str | None = None, pmcid: str | None = None):
        super().__init__(message, details={"source": source, "record": record, "field": field, "pmcid": pmcid})
        self.source, self.record, self.field, self.pmcid = source, record, field, pmcid
