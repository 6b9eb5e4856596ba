"""The cluster engine (Elasticsearch 8 / OpenSearch)."""
