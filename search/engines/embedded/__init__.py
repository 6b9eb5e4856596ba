"""The embedded engine (tantivy, no server): builds are folders of the data directory, searched in process."""

from search.engines.protocol import Capabilities

#: builds are local folders; searches are CPU work in this process; one machine's index; tantivy fixes k1 and b
CAPABILITIES = Capabilities(local_builds=True, in_process=True, shared=False, bm25_params=False)
