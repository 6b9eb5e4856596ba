"""flysift indexer: reads corpus sources, validates and normalises papers, splits passages, feeds an engine."""
