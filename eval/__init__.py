"""Evaluation: FlyAOC curation metrics (parity with FlyAOC's evaluator), reference coverage, IR metrics, reports.

Talks to the service only through ``search.client``; imports ``search`` models and ``search.ontology.model`` only.
"""
