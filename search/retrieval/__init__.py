"""Retrieval: the query planner, fusion, the dense index and the search service."""
