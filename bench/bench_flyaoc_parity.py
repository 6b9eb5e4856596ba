"""Compare our FlyAOC metrics (``flysift eval flyaoc`` summary.json) with FlyAOC's own evaluator output
(``/work/shared/tools/flyaoc_parity.sh`` OUT_JSON) number by number.

FlyAOC rounds every aggregate to 4 decimals (round half to even), so a value matches when round(ours, 4) equals
the reference within 1e-9; integer counts must be equal. Prints one line per set and exits 1 on any mismatch.

usage: python bench/bench_flyaoc_parity.py OURS_SUMMARY.json REFERENCE.json [--show-all]
       (genes.json must sit beside summary.json)
       python bench/bench_flyaoc_parity.py make-stress PERFECT_DIR GO_OBO FBBT_OBO OUT_DIR [SEED]

``make-stress`` derives a prediction set that exercises every rule at once from the perfect set of
``flyaoc_make_parity_preds.py``: one failed gene (output null), one missing file, run records, shuffled ranks,
duplicates, obsolete / alternative / unknown / cross-aspect GO ids, obsolete and unknown FBbt ids, records
without anatomy, description-only GO items, and case/space variants of synonyms.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
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


def pairs(ours: dict[str, Any], genes: list[dict[str, Any]], ref: dict[str, Any]) -> list[tuple[str, float, float]]:
    """(name, our value, reference value) for every metric both report; ``genes`` is our genes.json list."""
    agg, tasks = ref["evaluator_output"]["aggregate"], ours["tasks"]
    out: list[tuple[str, float, float]] = []
    for (rt, rb), task in RAK.items():
        block = agg[rt][rb]
        for k in block["k_values"]:
            for kind in ("exact", "semantic"):
                if f"{kind}_micro" not in tasks[task]["recall_at_k"][str(k)]:
                    continue
                for ref_avg, our_avg in (("micro", "micro"), ("mean", "macro")):
                    value = tasks[task]["recall_at_k"][str(k)][f"{kind}_{our_avg}"]
                    out.append((f"{task} {kind} {our_avg} @{k}", value, block[f"{ref_avg}_{kind}_at_k"][str(k)]))
    for (rt, rb), (task, ob) in SETS.items():
        for rk, ok in SET_KEYS.items():
            if rk in agg[rt][rb] and ok in tasks[task][ob]:
                out.append((f"{task} {ob} {ok}", tasks[task][ob][ok], agg[rt][rb][rk]))
    # FlyAOC's per-gene blocks exist for genes with output only, so compare the unique-set sizes of usable genes
    for name, task in (("go", "go"), ("anatomy", "anatomy"), ("synonyms_combined", "synonyms"),
                       ("synonyms_fullname", "synonyms_fullname"), ("synonyms_symbol", "synonyms_symbol")):
        usable = sum(g["tasks"][task]["n"] for g in genes if g["status"] == "ok")
        out.append((f"{task} set sizes of usable genes", usable,
                    ref["summary"]["micro_denominators"][name]["sum_gt_in_corpus_count"]))
    return out


def make_stress(perfect_dir: str, go_obo: str, fbbt_obo: str, out_dir: str, seed: int = 7) -> dict[str, Any]:
    """Write the stress set; returns what was done to which gene."""
    from search.ontology.model import Ontology

    rng = random.Random(seed)
    go, fbbt = Ontology.load(go_obo, "go"), Ontology.load(fbbt_obo, "fbbt")
    go_obsolete = sorted(t for t in go.ids if go.is_obsolete(t))[:200]
    go_alt = sorted(a for t in go.terms() if not t.obsolete for a in t.alt_ids)[:200]
    go_live = [t for t in go.ids if not go.is_obsolete(t)]
    fbbt_obsolete = sorted(t for t in fbbt.ids if fbbt.is_obsolete(t) and t.startswith("FBbt:"))
    fbbt_live = [t for t in fbbt.ids if not fbbt.is_obsolete(t) and t.startswith("FBbt:")]
    files = sorted(Path(perfect_dir).glob("*.json"))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    log: dict[str, Any] = {"failed": files[0].stem, "missing": files[1].stem, "genes": len(files) - 1}
    for n, f in enumerate(files):
        if n == 1:
            continue  # missing: no file at all
        obj = json.loads(f.read_text())
        if n == 0:
            (out / f.name).write_text(json.dumps({"output": None, "error": "MaxTurnsExceeded", "usage": {}}))
            continue
        go_items = list(obj["task1_function"])
        extra = [rng.choice(go_obsolete), rng.choice(go_alt), "GO:9999999", rng.choice(go_live), rng.choice(go_live)]
        for gid in extra:
            go_items.insert(rng.randrange(len(go_items) + 1), {"go_id": gid, "qualifier": "enables", "aspect": "F"})
        if go_items and n % 3 == 0:
            go_items.insert(rng.randrange(len(go_items) + 1), dict(rng.choice(go_items)))  # duplicate id
        if n % 5 == 0:
            go_items.insert(0, {"description": "made-up process", "qualifier": "involved_in", "aspect": "P"})
        if n % 4 == 0:
            rng.shuffle(go_items)
        ex = list(obj["task2_expression"])
        for anat in (rng.choice(fbbt_obsolete), "FBbt:99999999", rng.choice(fbbt_live), None):
            ex.insert(rng.randrange(len(ex) + 1), {"expression_type": "transcript", "anatomy_id": anat,
                                                   "stage_id": None})
        if n % 4 == 1:
            rng.shuffle(ex)
        syn = obj["task3_synonyms"]
        fulls = [s.upper() if i % 2 else f"  {s} " for i, s in enumerate(syn["fullname_synonyms"])]
        syms = list(syn["symbol_synonyms"]) + [s.lower() for s in syn["symbol_synonyms"][:2]] + ["not-a-synonym"]
        rng.shuffle(syms)
        body = {"task1_function": go_items, "task2_expression": ex,
                "task3_synonyms": {"fullname_synonyms": fulls, "symbol_synonyms": syms}}
        record = {"output": body, "usage": {"input_tokens": 1}} if n % 2 else {**obj, **body}
        (out / f.name).write_text(json.dumps(record, indent=1))
    return log


def main(argv: list[str]) -> int:
    if argv[:1] == ["make-stress"] and len(argv) >= 5:
        seed = int(argv[5]) if len(argv) > 5 else 7
        print(json.dumps(make_stress(argv[1], argv[2], argv[3], argv[4], seed)))
        return 0
    if len(argv) < 2:
        sys.exit(__doc__)
    ours, ref = (json.loads(Path(p).read_text()) for p in argv[:2])
    our_genes = json.loads((Path(argv[0]).parent / "genes.json").read_text())["genes"]
    show_all = "--show-all" in argv
    bad, worst = 0, 0.0
    rows = pairs(ours, our_genes, ref)
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
