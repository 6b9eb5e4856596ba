"""`flysift train term-encoder` shows the training's own defaults and bounds (search.ontology.encoder.config, which
the library, the curve and the GPU script train with) without importing the training code or numpy."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import click
import pytest

from search.cli.train import term_encoder
from search.core.errors import InvalidRequest
from search.ontology.encoder.config import BOUNDS, SHARE_BOUNDS, TrainConfig

#: CLI option → TrainConfig field, where the names differ
FIELD = {"model_negatives": "model_negative_share"}


def test_the_cli_defaults_and_bounds_are_the_training_configs():
    config = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    compared = 0
    for param in term_encoder.params:
        field = FIELD.get(param.name or "", param.name)
        if field in config and field != "ontologies":
            assert param.default == config[field], f"--{param.name}: {param.default} != TrainConfig.{field}"
            compared += 1
        if field in BOUNDS:
            assert isinstance(param.type, click.IntRange)
            assert (param.type.min, param.type.max) == BOUNDS[field], param.name
        if field in SHARE_BOUNDS:
            assert isinstance(param.type, click.FloatRange)
            assert (param.type.min, param.type.max) == SHARE_BOUNDS[field], param.name
    assert compared >= 9   # epochs, seed, batch size, lr, pairs per term, frozen, sequence length, negatives, precision


def test_the_cli_loads_without_the_training_code():
    code = ("import sys, search.cli.main, search.cli.train; "
            "print(sorted(m for m in ('search.ontology.encoder.train', 'numpy', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("field", sorted(SHARE_BOUNDS))
def test_a_share_above_one_is_refused_naming_its_field(field):
    TrainConfig(**{field: SHARE_BOUNDS[field][1]}).check()
    with pytest.raises(InvalidRequest, match=field) as e:
        TrainConfig(**{field: 1.5}).check()
    assert e.value.details == {"field": field}
