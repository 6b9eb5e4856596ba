"""Ontologies: OBO loading and the DAG, hidden terms, and the term service."""
