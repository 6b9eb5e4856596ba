"""Progress of long commands on stderr, as a person or a program wants it.

On a terminal: a tqdm bar for counted work and a line per stage. Piped (a log file, CI): nothing, so logs keep only
the commands' own result lines. With ``--json``: one JSON object per line (``{"event": "stage", "stage": …}``,
``{"event": "progress", "done": …, "total": …, "unit": …}``, at most one progress line per interval and always the
last). The bar is created at the first count, so a run never starts with an empty ``0 records [00:00, ?]`` line.

It lives in ``search.core`` because every command line shares it: the indexer's, the evaluator's (a client, which
may import the core but not the service's CLI) and the service's.
"""

from __future__ import annotations

import json
import sys
import time
from typing import IO, Any

#: seconds between two JSON progress lines (the last one is always written)
JSON_INTERVAL_S = 1.0


class Progress:
    def __init__(self, unit: str, *, json_lines: bool = False, stream: IO[str] | None = None,
                 tty: bool | None = None, mininterval: float = 0.5):
        self.unit = unit
        self.stream = stream if stream is not None else sys.stderr
        self.json = json_lines
        self.tty = (tty if tty is not None else _isatty(self.stream)) and not json_lines
        self.mininterval = mininterval
        self._bar: Any = None
        self._last_json = 0.0
        self._emitted: int | None = None   # the ``done`` of the last JSON progress line
        self._done = 0
        self._total: int | None = None

    # ---- events ---------------------------------------------------------------------------------------------------
    def stage(self, name: str, *, always: bool = False, **info: Any) -> None:
        """A step of the work begins (``parsing go.obo``); its line shows on a terminal, also when piped if
        ``always``."""
        if self.json:
            self._emit({"event": "stage", "stage": name, **info})
        else:
            self.write(name if always else f"{name}…", always=always)

    def update(self, done: int, total: int | None = None) -> None:
        """``done`` of ``total`` (None: unknown) units are finished."""
        self._done, self._total = done, total if total else self._total
        if self.json:
            now = time.monotonic()
            if now - self._last_json >= JSON_INTERVAL_S or (self._total and done >= self._total):
                self._last_json = now
                self._emit_progress()
            return
        if not self.tty:
            return
        if self._bar is None:
            from tqdm import tqdm

            self._bar = tqdm(total=self._total, unit=f" {self.unit}", file=self.stream, dynamic_ncols=True,
                             mininterval=self.mininterval)
        if self._total and self._bar.total != self._total:
            self._bar.total = self._total
        self._bar.update(done - self._bar.n)

    def write(self, message: str, *, always: bool = False) -> None:
        """A line of text on a terminal (above the bar), also when piped if ``always`` (warnings); as
        ``{"event": "message"}`` with ``--json``."""
        if self.json:
            self._emit({"event": "message", "message": message})
        elif self._bar is not None:
            self._bar.write(message, file=self.stream)
        elif self.tty or always:
            print(message, file=self.stream, flush=True)

    def close(self) -> None:
        if self.json and self._done and self._emitted != self._done:
            self._emit_progress()
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # ---- output ---------------------------------------------------------------------------------------------------
    def _emit_progress(self) -> None:
        self._emitted = self._done
        self._emit({"event": "progress", "done": self._done, "total": self._total, "unit": self.unit})

    def _emit(self, event: dict[str, Any]) -> None:
        print(json.dumps(event), file=self.stream, flush=True)


def _isatty(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
