"""FlyAOC's rules: id patterns, ground truth, prediction validation."""
