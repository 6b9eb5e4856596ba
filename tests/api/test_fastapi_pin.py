"""Issue #25: the lean path (``search.api.fast``) reads FastAPI internals, so FastAPI is pinned to the minor release
they were verified on, and this fails loudly, saying what to do, when that no longer holds: another FastAPI is
installed, the pin in pyproject.toml drifts from the verified release, or an internal the lean path uses is gone."""

from __future__ import annotations

import importlib
import tomllib
from pathlib import Path

import fastapi
from fastapi.routing import iter_route_contexts

from search.api.app import create_app
from search.api.fast import FASTAPI_INTERNALS, LEAN_ENDPOINTS, ROUTE_INTERNALS, VERIFIED_FASTAPI
from search.core.config import Settings

ROOT = Path(__file__).resolve().parents[2]
HOW = (f"search/api/fast.py uses FastAPI internals verified on FastAPI {VERIFIED_FASTAPI}.x: to move, raise the pin "
       "in pyproject.toml, run tests/api/test_fast_path.py and fix what differs, then set VERIFIED_FASTAPI")


def test_the_installed_fastapi_is_the_verified_release():
    assert fastapi.__version__.startswith(VERIFIED_FASTAPI + "."), f"FastAPI {fastapi.__version__} installed. {HOW}"


def test_the_pin_is_the_verified_minor_release():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pin = next(d for d in deps if d.startswith("fastapi"))
    major, minor = VERIFIED_FASTAPI.split(".")
    assert pin == f"fastapi>={VERIFIED_FASTAPI},<{major}.{int(minor) + 1}", f"pin {pin!r}. {HOW}"


def test_every_internal_the_lean_path_uses_exists(tmp_path):
    missing = [f"{m}.{name}" for m, name in FASTAPI_INTERNALS if not hasattr(importlib.import_module(m), name)]
    routes = [r for r in iter_route_contexts(create_app(Settings(data_dir=tmp_path)).routes)
              if getattr(r, "endpoint", None) in LEAN_ENDPOINTS]
    assert routes
    missing += [f"route.{name}" for name in ROUTE_INTERNALS if not all(hasattr(r, name) for r in routes)]
    assert missing == [], f"gone from FastAPI {fastapi.__version__}: {missing}. {HOW}"
