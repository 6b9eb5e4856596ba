"""`flysift train term-encoder` states its defaults in its options (so `--help` shows them without importing the
training code); they must be the training's own (TrainConfig), which the library, the curve and the GPU script use."""

from __future__ import annotations

import dataclasses

from search.cli.train import term_encoder
from search.ontology.encoder.train import TrainConfig

#: CLI option → TrainConfig field, where the names differ
FIELD = {"model_negatives": "model_negative_share"}


def test_the_cli_defaults_are_the_training_config_defaults():
    config = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    compared = 0
    for param in term_encoder.params:
        field = FIELD.get(param.name or "", param.name)
        if field in config and field not in ("ontologies", "precision"):
            assert param.default == config[field], f"--{param.name}: {param.default} != TrainConfig.{field}"
            compared += 1
    assert compared >= 7   # epochs, seed, batch size, lr, pairs per term, frozen layers, sequence length, negatives
