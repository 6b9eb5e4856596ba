"""The term encoder's training settings (:class:`TrainConfig`): one home for their defaults and bounds, light to
import, so that ``flysift train term-encoder --help`` shows the defaults the library, the curve
(bench/bench_term_encoder_curve.py) and the GPU script train with, without importing the training code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from search.core.errors import InvalidRequest

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
#: the default held-out fractions (of terms): test is what bench_ontology scores, dev what tuning may look at
TEST_FRACTION = 0.10
DEV_FRACTION = 0.05
#: the integer settings' bounds (inclusive), checked by :meth:`TrainConfig.check` and the CLI's options
BOUNDS = {"epochs": (0, 100), "batch_size": (2, 4096), "max_seq_length": (8, 512), "frozen_layers": (0, 64),
          "max_pairs_per_term": (1, 10_000)}
#: the shares' bounds (inclusive): a share of a batch's anchors cannot pass 1
SHARE_BOUNDS = {"synonym_positive_share": (0.0, 1.0), "model_negative_share": (0.0, 1.0),
                "definition_share": (0.0, 1.0)}


@dataclass(frozen=True)
class TrainConfig:
    """Everything that decides the trained weights (the resume fingerprint and the manifest record it)."""

    seed: int = 13
    epochs: int = 2
    batch_size: int = 64
    lr: float = 4e-4   # beat 1e-4 and 5e-5 on every dev figure of the curve and of full runs (docs/ontologies.md)
    warmup: float = 0.05
    weight_decay: float = 0.01
    scale: float = 20.0
    max_seq_length: int = 32
    frozen_layers: int = 2
    max_pairs_per_term: int = 3
    synonym_positive_share: float = 0.25
    model_negative_share: float = 0.5
    sibling_negatives: bool = True
    definition_share: float = 0.0   # training terms whose definition is also an anchor (pairs.anchors; 0: none)
    split_seed: int = 0
    test_fraction: float = TEST_FRACTION
    dev_fraction: float = DEV_FRACTION
    precision: str = "auto"
    ontologies: tuple[str, ...] = ()

    def check(self) -> None:
        for name, (lo, hi) in BOUNDS.items():
            if not lo <= getattr(self, name) <= hi:
                raise InvalidRequest(f"{name}: must be between {lo} and {hi}", details={"field": name})
        for name in ("lr", "warmup", "weight_decay", "scale", "synonym_positive_share", "model_negative_share",
                     "definition_share", "test_fraction", "dev_fraction"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise InvalidRequest(f"{name}: must be a finite number ≥ 0", details={"field": name})
        for name, (low, high) in SHARE_BOUNDS.items():
            if not low <= getattr(self, name) <= high:
                raise InvalidRequest(f"{name}: must be between {low:g} and {high:g}", details={"field": name})
        if self.test_fraction + self.dev_fraction >= 0.9:
            raise InvalidRequest("test_fraction + dev_fraction: must stay below 0.9", details={"field": "split"})
        if self.precision not in PRECISIONS:
            raise InvalidRequest(f"precision: one of {', '.join(PRECISIONS)}", details={"field": "precision"})
