"""Text: the shared analysis, passage splitting, snippets and the gene lexicon."""
