"""JSON Lines input for the evaluators: one parsed record per non-blank line, bad JSON reported by file and line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from search.core.errors import InputError


def read_jsonl(path: Path) -> Iterator[tuple[int, Any]]:
    """``(line number, record)`` for each non-blank line of ``path``."""
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield n, json.loads(line)
            except json.JSONDecodeError as e:
                raise InputError(f"invalid JSON: {e.msg}", source=str(path), record=n) from e
