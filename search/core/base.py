"""The base of the core data models.

``defer_build``: pydantic builds a model's validator when the model is first used rather than when its module is
imported. The core modules define ~35 models; a ``flysift terms`` call uses a handful, and building all of them at
import cost ~50 ms of a call that should take under half a second. The server uses most of them and pays the build
on the first request instead of at import.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Model(BaseModel):
    """``BaseModel`` built on first use (subclasses' ``model_config`` adds to this one)."""

    model_config = ConfigDict(defer_build=True)
