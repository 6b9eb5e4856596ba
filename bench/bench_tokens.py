"""Index-side analysis speed (issue #12 item 2): every way flysift can turn a text into a view's tokens, in one run on
one generated corpus, with the whitespace tokenizer (no analysis at all) as the floor.

    .venv/bin/python -m indexer.synthetic --papers 200 --words 8300 --seed 7 --out /tmp/tok-corpus
    .venv/bin/python bench/bench_tokens.py --corpus /tmp/tok-corpus/corpus.jsonl [--repeat 3] [--out results.json]

Rows: tantivy's analyzers as ``analysis.ANALYZERS`` builds them (word: simple tokenizer + remove-long + lower-case +
stemmer; symbol: the regex tokenizer on ``SYMBOL_PATTERN`` + remove-long), the two backends of
``search.text.tokens`` (``python``; ``native`` = ``flysift_native`` when installed: ``pip install ./native``) and
tantivy's bare simple and whitespace tokenizers. Each analyser reads every text of the corpus (title, abstract and
every section paragraph, one call per text) ``--repeat`` times; the fastest pass is reported as wall seconds, CPU
seconds of the process (all its threads: the native scan runs without the GIL) and MB/s of UTF-8 input. tantivy's
rows return a list of tokens, the backends one space-joined string (what the index stores). The native backend is
also run on two new threads per pass over halves of the texts (their per-thread stem caches start empty, as in a
fresh indexer worker; the one-thread rows' fastest pass has a warm cache), and its output is checked equal to the
Python backend's.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tantivy  # noqa: E402

from bench.common import machine, markdown_table, write_json  # noqa: E402
from search.text import analysis, tokens  # noqa: E402


def corpus_texts(path: Path) -> list[str]:
    """Every text field of every paper of a generated (FlyAOC-format) corpus, one string per paragraph."""
    texts: list[str] = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            paper = json.loads(line)
            texts += [paper.get("title") or "", paper.get("abstract") or ""]
            for paragraphs in (paper.get("sections") or {}).values():
                texts += [p for p in paragraphs if isinstance(p, str)]
    return [t for t in texts if t]


def timed(fn: Callable[[list[str]], object], texts: list[str], repeat: int) -> tuple[float, float]:
    """(wall, CPU) seconds of the fastest of ``repeat`` passes of ``fn`` over ``texts``."""
    best: tuple[float, float] | None = None
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        fn(texts)
        run = (time.perf_counter() - wall, time.process_time() - cpu)
        best = run if best is None or run[0] < best[0] else best
    assert best is not None
    return best


def each(analyse: Callable[[str], object]) -> Callable[[list[str]], object]:
    def run(texts: list[str]) -> object:
        for text in texts:
            analyse(text)
        return None
    return run


def on_two_threads(analyse: Callable[[str], object]) -> Callable[[list[str]], object]:
    def run(texts: list[str]) -> object:
        half = len(texts) // 2
        with ThreadPoolExecutor(2) as pool:
            return list(pool.map(each(analyse), [texts[:half], texts[half:]]))
    return run


def bare(tokenizer: tantivy.Tokenizer) -> Callable[[str], object]:
    return tantivy.TextAnalyzerBuilder(tokenizer).build().analyze


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", type=Path, required=True, help="corpus.jsonl written by indexer.synthetic")
    ap.add_argument("--repeat", type=int, default=3, help="passes per analyser; the fastest is reported")
    ap.add_argument("--out", type=Path, help="also write the results as JSON here")
    args = ap.parse_args()
    if not args.corpus.is_file():
        sys.exit(f"bench_tokens: no corpus file at {str(args.corpus)[:200]} (make one with indexer.synthetic)")

    texts = corpus_texts(args.corpus)
    mb = sum(len(t.encode()) for t in texts) / 1e6
    try:
        import flysift_native  # type: ignore[import-not-found,unused-ignore]
        native: Any = flysift_native
    except ImportError:
        native = None

    cases: list[tuple[str, Callable[[list[str]], object] | None]] = [
        ("tantivy word analyzer (simple + remove-long + lower + stem)", each(analysis.ANALYZERS["fs_word"].analyze)),
        ("tantivy symbol analyzer (regex tokenizer + remove-long)", each(analysis.ANALYZERS["fs_symbol"].analyze)),
        ("python backend, word (tantivy analyzer + join)", each(tokens._python_word_text)),
        ("python backend, symbol (regex module + join)", each(tokens._python_symbol_text)),
        ("native backend, word", each(native.word_text) if native else None),
        ("native backend, symbol", each(native.symbol_text) if native else None),
        ("native backend, word, 2 new threads (cold stem cache)", on_two_threads(native.word_text) if native else None),
        ("native backend, symbol, 2 new threads", on_two_threads(native.symbol_text) if native else None),
        ("tantivy simple tokenizer alone", each(bare(tantivy.Tokenizer.simple()))),
        ("tantivy whitespace tokenizer alone (floor)", each(bare(tantivy.Tokenizer.whitespace()))),
    ]
    results: list[dict[str, object]] = []
    for name, fn in cases:
        if fn is None:
            results.append({"analyser": name, "skipped": "flysift_native not installed: pip install ./native"})
            continue
        wall, cpu = timed(fn, texts, args.repeat)
        results.append({"analyser": name, "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
                        "mb_per_s": round(mb / wall, 1), "mb_per_cpu_s": round(mb / cpu, 1)})
        print(f"{name}: {wall:.2f} s wall, {cpu:.2f} s CPU", file=sys.stderr)

    equal = None
    if native:
        equal = all(native.word_text(t) == tokens._python_word_text(t)
                    and native.symbol_text(t) == tokens._python_symbol_text(t) for t in texts)
    host = machine()
    load = host["load_avg_1m"]
    report = {"machine": host, "corpus": str(args.corpus), "texts": len(texts), "mb": round(mb, 2),
              "repeat": args.repeat, "native_equals_python": equal, "results": results}
    if args.out:
        write_json(args.out, report)
    print(f"{len(texts):,} texts, {mb:.1f} MB UTF-8, fastest of {args.repeat} passes; "
          f"load {load}; native output equal to python: {equal}\n")
    rows = [[r["analyser"], r.get("wall_s", "-"), r.get("cpu_s", "-"), r.get("mb_per_s", "-"),
             r.get("mb_per_cpu_s", r.get("skipped", "-"))] for r in results]
    print(markdown_table(["analyser", "wall s", "CPU s", "MB/s (wall)", "MB/s (CPU)"], rows))


if __name__ == "__main__":
    main()
