"""What an operator is told about one part of the service: a :class:`Check` (its name, its state, what was found,
the file it names and what to run), from the engines, the session store and the data dir's other files.

``/v1/ready``, ``flysift doctor`` and ``flysift serve``'s start-up check all report lists of these
(``search.ops.readiness``); each part contributes its own checks (``Engine.readiness``, the store's ``readiness``),
so a new engine or store says what "ready" means for it in its own module.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

State = Literal["ok", "warn", "fail"]


class Check(BaseModel):
    """One finding. ``fail``: the service cannot serve this part (not ready); ``warn``: it serves, but an operator
    should look; ``damaged``: a file is not what flysift wrote (``flysift serve`` refuses to start on one)."""

    name: str = Field(description="What was checked, e.g. 'collection default', 'session store', 'ontology go'")
    state: State
    message: str = Field(description="What was found, for a person")
    file: str | None = Field(None, description="The file it is about, relative to the data dir")
    fix: str | None = Field(None, description="What to run or do about it")
    damaged: bool = Field(False, description="A file is damaged (not merely missing or busy)")
    data: dict[str, Any] | None = Field(None, description="Facts for programs (the metrics read a collection's "
                                                          "published build, its time and papers from here)")

    def line(self) -> str:
        """The check as one line: ``fail collection default: collections/default/CURRENT: not JSON → restore …``."""
        where = f"{self.file}: " if self.file else ""
        fix = f" → {self.fix}" if self.fix else ""
        return f"{self.state:<4} {self.name}: {where}{self.message}{fix}"


def ok(name: str, message: str, **kw: object) -> Check:
    return Check(name=name, state="ok", message=message, **kw)  # type: ignore[arg-type]


def warn(name: str, message: str, **kw: object) -> Check:
    return Check(name=name, state="warn", message=message, **kw)  # type: ignore[arg-type]


def fail(name: str, message: str, **kw: object) -> Check:
    return Check(name=name, state="fail", message=message, **kw)  # type: ignore[arg-type]


#: what to do about a damaged file of the data dir (backups: docs/operations.md)
RESTORE = "restore the data dir from a backup (`flysift backup restore DIR --data-dir D`)"
