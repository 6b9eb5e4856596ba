"""The embedded engine (tantivy, no server)."""
