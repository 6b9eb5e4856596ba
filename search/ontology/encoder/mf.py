"""The molecular-function rule (issue #30, item 4): GO's molecular functions are named as activities ("annealing
activity", "DNA binding", "protein kinase activity"), while text names them by what happens ("hybridization",
"binding", "phosphorylates"). A query that does not name an activity is a guess when it is resolved to an MF term,
so callers can ask for MF terms only for an activity-shaped query (``mf_activity_only``) and abstain otherwise.

A query is **activity-shaped** when one of its words

- is ``activity`` / ``activities`` (how 80 % of GO's MF names end),
- is ``binding`` / ``binds`` / ``bind`` with at least one other word, the thing bound ("DNA binding"; bare
  "binding" names no function),
- names an enzyme: ends in ``-ase`` or ``-ases`` and is not one of the everyday words with that ending
  (:data:`NOT_ENZYMES`: base, case, phase, release, increase, disease…),
- or is one of the function nouns of :data:`FUNCTION_NOUNS` (transporter, receptor, channel, ligand, inhibitor…),
  the heads of GO's MF names and synonyms after "activity" and "binding".

The list was read off GO's MF names and synonyms (their last words), not off any annotated text. The term
recogniser reads MF mentions in their sentence instead (``search.ontology.recognise.states_activity``: the word
"activity", a named binding, or an activity verb before the mention); this rule is for a query, which has no
sentence around it.
"""

from __future__ import annotations

import re

_WORD = re.compile(r"[A-Za-z][A-Za-z0-9'-]*")

ACTIVITY = frozenset({"activity", "activities"})
BINDING = frozenset({"binding", "binds", "bind"})
FUNCTION_NOUNS = frozenset({
    "transporter", "transporters", "receptor", "receptors", "channel", "channels", "carrier", "carriers",
    "exchanger", "exchangers", "symporter", "symporters", "antiporter", "antiporters", "uniporter", "uniporters",
    "pump", "pumps", "porin", "porins", "permease", "permeases", "ligand", "ligands", "inhibitor", "inhibitors",
    "activator", "activators", "coactivator", "coactivators", "corepressor", "corepressors", "repressor",
    "repressors", "agonist", "antagonist", "chaperone", "chaperones", "adaptor", "adaptors", "adapter", "adapters",
    "cofactor", "cofactors", "enzyme", "enzymes", "opsin", "opsins", "toxin", "toxins", "transducer",
    "regulator", "regulators", "scaffold", "constituent",
})
NOT_ENZYMES = frozenset({
    "base", "bases", "case", "cases", "phase", "phases", "release", "releases", "increase", "increases",
    "decrease", "decreases", "disease", "diseases", "ease", "lease", "chase", "phrase", "phrases", "erase",
    "purchase", "database", "databases", "crease", "cease", "please", "tease", "vase", "showcase", "suitcase",
    "staircase", "briefcase", "uppercase", "lowercase", "testcase", "abase", "metaphase", "anaphase", "prophase",
    "telophase", "interphase", "prometaphase",
})


def words(query: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(query)]


def activity_shaped(query: str) -> bool:
    """Whether ``query`` names a molecular function (the rule of this module's docstring)."""
    ws = words(query)
    for w in ws:
        if w in ACTIVITY or w in FUNCTION_NOUNS:
            return True
        if w in BINDING and len(ws) > 1:
            return True
        if (w.endswith("ase") or w.endswith("ases")) and len(w) >= 5 and w not in NOT_ENZYMES:
            return True
    return False
