"""The REST API (FastAPI): the source of truth for every other interface."""
