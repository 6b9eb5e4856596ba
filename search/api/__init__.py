"""The REST API (FastAPI): the source of truth for every other interface. ``create_app`` builds it."""

from search.api.app import create_app

__all__ = ["create_app"]
