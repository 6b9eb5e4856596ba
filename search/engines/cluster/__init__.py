"""The cluster engine (Elasticsearch 8 / OpenSearch)."""

from search.engines.protocol import Capabilities

#: builds are indices on the cluster; searches wait on the network; every API machine shares the index; k1 and b are
#: set per index
CAPABILITIES = Capabilities(local_builds=False, in_process=False, shared=True, bm25_params=True)
