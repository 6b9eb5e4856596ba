"""Supplementary files of JATS articles: found (``package``), checked (``guards``), read with the library made for
each format (``extract``), cut into passages with provenance (``chunks``) and listed in the paper's registry with a
status (``files``), all within ``limits``. The JATS reader (``indexer.sources.jats``) calls ``files.collect`` for
each article; docs/supplements.md says what is read and how."""
