"""Core: the domain model, the engine-neutral query, errors and configuration."""
