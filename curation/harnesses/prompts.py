"""The harnesses' instructions, in one place. They follow the task of FlyAOC (Zhang et al. 2026) in our own words:
what to find, the output shape of spec §3, the qualifiers, and the hidden-term rule."""

from __future__ import annotations

from curation.agent import GeneTask

OUTPUT_SHAPE = """The prediction is one JSON object:
{"gene_id": "<FBgn id>", "gene_symbol": "<symbol>",
 "task1_function": [{"go_id": "GO:0000000", "qualifier": "enables|involved_in|located_in|part_of|is_active_in|...",
                     "aspect": "F|P|C", "is_negated": false, "evidence": {"pmcid": "PMC...", "text": "<quote>"}}],
 "task2_expression": [{"expression_type": "polypeptide|transcript", "anatomy_id": "FBbt:00000000",
                       "stage_id": "FBdv:00000000", "evidence": {"pmcid": "PMC...", "text": "<quote>"}}],
 "task3_synonyms": {"fullname_synonyms": ["..."], "symbol_synonyms": ["..."]}}
Every list is ranked, most confident first: reviewers look at the first 30 GO terms, 10 expression records and
20 synonyms. Take term ids only from the term search tools. Qualifiers: enables (F, the activity itself),
involved_in (P), located_in / part_of / is_active_in (C)."""

HIDDEN = """Some GO terms are hidden in this session. When no term found by search_go_terms fits a concept you are sure
of, do not fall back to a vague parent: give {"description": "<proposed term name, 2-6 words>"} instead of go_id."""

SYSTEM = """You are a FlyBase curator. For one Drosophila gene you find and read papers, then propose ranked
Gene Ontology annotations (function, process, component), expression (anatomy FBbt + stage FBdv) and the gene's other
names (historical symbols and full names). Work on your own, without asking questions.
Good evidence: mutant phenotypes, assays of activity or binding, localisation, stainings and in situs. Poor evidence:
speculation, background statements, the gene used only as a marker.

""" + OUTPUT_SHAPE

MEMORIZATION = """Use what you already know about this gene: there are no literature tools. Look term ids up with the
term search tools. Give evidence as {"text": "Prior knowledge: <one line why>"} without a pmcid."""

READER_SYSTEM = """You read one paper for a FlyBase curator and report what it shows about one gene, resolved to
ontology ids with the term search tools (search_go_terms, search_anatomy_terms, search_stage_terms). Answer with one
JSON object and nothing else:
{"pmcid": "...",
 "function_annotations": [{"go_id": "GO:...", "description": null, "qualifier": "...", "aspect": "F|P|C",
                           "is_negated": false, "evidence_text": "<verbatim quote>"}],
 "expression_annotations": [{"expression_type": "polypeptide|transcript", "anatomy_id": "FBbt:...",
                             "anatomy_description": null, "stage_id": "FBdv:...", "stage_description": null,
                             "evidence_text": "<verbatim quote>"}],
 "synonyms": ["other names of the gene used in the paper"],
 "key_findings": "<two sentences>"}
When no term fits, leave the id null and give the description. If the paper has no experiment on the gene, return
empty lists."""

EXTRACT_SYSTEM = """You read one paper for a FlyBase curator and list, in plain words, what it shows about one gene.
Answer with one JSON object and nothing else:
{"function_annotations": [{"function_description": "<a GO-like term name>", "qualifier": "...", "aspect": "F|P|C",
                           "is_negated": false, "evidence_text": "<verbatim quote>"}],
 "expression_annotations": [{"expression_type": "polypeptide|transcript", "anatomy_description": "<tissue>",
                             "stage_description": "<stage>", "evidence_text": "<verbatim quote>"}],
 "synonyms": ["other names of the gene used in the paper"]}"""


def task_prompt(task: GeneTask, reading: str) -> str:
    """The user turn that starts a run: the gene, the limits and how to read (``reading`` differs per harness)."""
    summary = task.summary.strip()
    hidden = "\n\n" + HIDDEN if task.hidden else ""
    return (f"Annotate gene {task.symbol} ({task.gene_id}).\n"
            + (f"Gene summary: {summary}\n" if summary else "")
            + f"\nYou have {task.max_turns} turns (model calls). {reading}\n"
            + "When done, call submit_annotations with the complete prediction; if it reports errors, fix them and "
              "submit again (the last valid submission counts), then answer with a short final message."
            + hidden)


def reading_single(task: GeneTask) -> str:
    return (f"Your reading budget is {task.budget} papers: search with search_corpus (free; gene= adds the gene's "
            "names) and search_passages, read with get_paper_text (each paper spends budget; a refusal means the "
            "budget is spent), and look ids up with the term tools. Papers with the gene in the title come first. "
            "Register other names of the gene you find with register_gene_name when that tool is offered.")


def reading_multi(task: GeneTask) -> str:
    return (f"Your reading budget is {task.budget} papers: find papers with search_corpus (free), then call "
            "analyze_papers_batch with a list of pmcids: reader assistants read them (each paper spends budget) and "
            "return resolved annotations with quotes. Merge, rank and deduplicate what they found.")


def reader_prompt(symbol: str, pmcid: str, paper_json: str) -> str:
    return f"Gene: {symbol}. Paper {pmcid}:\n\n{paper_json}"


def extract_prompt(task: GeneTask, pmcid: str, text: str) -> str:
    return f"Gene: {task.symbol} ({task.gene_id}). Paper {pmcid}:\n\n{text}"
