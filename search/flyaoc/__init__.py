"""FlyAOC's rules, one home each: id shapes (``ids``), the ground-truth reader (``groundtruth``), predictions and the
issues found in them (``predictions``), and the validation of a submitted prediction (``validation``). The service,
the lexicon, sessions and the evaluator all use these, so FlyAOC's files mean the same everywhere."""

from search.flyaoc.groundtruth import GeneRecord, cited_pmcids, load_ground_truth, read_ground_truth
from search.flyaoc.predictions import (
                                       SCORED_K,
                                       TASKS,
                                       GenePrediction,
                                       PredictionIssue,
                                       load_predictions,
                                       normalize_synonym,
                                       parse_prediction,
)
from search.flyaoc.validation import lookup_in, validate_output
from search.schema.flyaoc import Issue, ValidationReport

__all__ = ["SCORED_K", "TASKS", "GeneRecord", "GenePrediction", "Issue", "PredictionIssue", "ValidationReport",
           "cited_pmcids", "load_ground_truth", "load_predictions", "lookup_in", "normalize_synonym",
           "parse_prediction", "read_ground_truth", "validate_output"]
