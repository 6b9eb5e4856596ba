"""Sessions: models and budget rules, the session stores, API keys."""
