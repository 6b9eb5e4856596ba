"""flysift core: domain model, configuration, analysis, ontologies, engines, planner, service, client."""

__version__ = "0.1.0"
