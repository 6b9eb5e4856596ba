"""Compare our FlyAOC metrics (``flysift eval flyaoc`` summary.json) with FlyAOC's own evaluator output
(``/work/shared/tools/flyaoc_parity.sh`` OUT_JSON) number by number.

FlyAOC rounds every aggregate to 4 decimals (round half to even), so a value matches when round(ours, 4) equals
the reference within 1e-9; integer counts must be equal. Prints one line per set and exits 1 on any mismatch.

usage: python bench/bench_flyaoc_parity.py OURS_SUMMARY.json REFERENCE.json [--show-all]
"""

from __future__ import annotations

import json
import sys
from typing import Any

#: reference recall@k block → our task
RAK = {("task1_go", "recall_at_k"): "go", ("task2_expression", "anatomy_recall_at_k"): "anatomy",
       ("task3_synonyms", "fullname_recall_at_k"): "synonyms_fullname",
       ("task3_synonyms", "symbol_recall_at_k"): "synonyms_symbol",
       ("task3_synonyms", "combined_recall_at_k"): "synonyms"}
#: reference set-metric block → (our task, our block)
SETS = {("task1_go", "exact"): ("go", "exact_set"), ("task1_go", "semantic"): ("go", "semantic_set"),
        ("task2_expression", "anatomy"): ("anatomy", "exact_set"),
        ("task2_expression", "anatomy_semantic"): ("anatomy", "semantic_set"),
        ("task3_synonyms", "fullname"): ("synonyms_fullname", "exact_set"),
        ("task3_synonyms", "symbol"): ("synonyms_symbol", "exact_set"),
        ("task3_synonyms", "combined"): ("synonyms", "exact_set")}
SET_KEYS = {"mean_precision": "precision_macro", "mean_recall": "recall_macro", "mean_f1": "f1_macro",
            "micro_precision": "precision_micro", "micro_recall": "recall_micro", "total_tp": "tp",
            "total_fp": "fp", "total_fn": "fn", "total_predictions": "n_predictions",
            "total_gt_in_corpus": "n_ground_truth"}


def pairs(ours: dict[str, Any], ref: dict[str, Any]) -> list[tuple[str, float, float]]:
    """(name, our value, reference value) for every metric both report."""
    agg, tasks = ref["evaluator_output"]["aggregate"], ours["tasks"]
    out = []
    for (rt, rb), task in RAK.items():
        block = agg[rt][rb]
        for k in block["k_values"]:
            for kind in ("exact", "semantic"):
                if f"{kind}_micro" not in tasks[task]["recall_at_k"][str(k)]:
                    continue
                for ref_avg, our_avg in (("micro", "micro"), ("mean", "macro")):
                    out.append((f"{task} {kind} {our_avg} @{k}", tasks[task]["recall_at_k"][str(k)][f"{kind}_{our_avg}"],
                                block[f"{ref_avg}_{kind}_at_k"][str(k)]))
    for (rt, rb), (task, ob) in SETS.items():
        for rk, ok in SET_KEYS.items():
            if rk in agg[rt][rb] and ok in tasks[task][ob]:
                out.append((f"{task} {ob} {ok}", tasks[task][ob][ok], agg[rt][rb][rk]))
    for name, task in (("go", "go"), ("anatomy", "anatomy"), ("synonyms_combined", "synonyms"),
                       ("synonyms_fullname", "synonyms_fullname"), ("synonyms_symbol", "synonyms_symbol")):
        out.append((f"{task} recall@k denominator", tasks[task]["n_ground_truth"],
                    ref["summary"]["micro_denominators"][name]["sum_gt_in_corpus_count"]))
    return out


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        sys.exit(__doc__)
    ours, ref = (json.load(open(p)) for p in argv[:2])
    show_all = "--show-all" in argv
    bad, worst = 0, 0.0
    rows = pairs(ours, ref)
    genes = ref["evaluator_output"]["aggregate"]
    if (genes["genes_evaluated"], sorted(genes["failed_ids"]), sorted(genes["skipped_ids"])) != (
            ours["genes"]["evaluated"], sorted(ours["genes"]["failed_ids"] + ours["genes"]["invalid_ids"]),
            sorted(ours["genes"]["missing_ids"])):
        print("gene accounting differs")
        bad += 1
    for name, mine, theirs in rows:
        diff = abs(round(mine, 4) - theirs)
        worst = max(worst, abs(mine - theirs))
        ok = diff <= 1e-9
        bad += not ok
        if show_all or not ok:
            print(f"{'OK ' if ok else 'BAD'} {name}: ours {mine!r} reference {theirs!r}")
    print(f"{len(rows)} values compared, {bad} mismatches; max |ours - reference| before rounding {worst:.2e}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
