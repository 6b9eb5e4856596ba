"""FlyAOC's id shapes, checked as whole strings: genes (``FBgn`` + 7 digits), GO (``GO:`` + 7), anatomy (``FBbt:`` + 8),
stages (``FBdv:`` + 8) and papers (``PMC`` + digits). The validator, the evaluator's prediction parser and the
ground-truth reader share them, so a well-formed id means the same everywhere.

Match with ``fullmatch`` (see :func:`well_formed`): ``re.match`` with ``$`` would also let a trailing newline
through.
"""

from __future__ import annotations

import re
from typing import TypeGuard

GENE_ID = re.compile(r"FBgn[0-9]{7}")
GO_ID = re.compile(r"GO:[0-9]{7}")
FBBT_ID = re.compile(r"FBbt:[0-9]{8}")
FBDV_ID = re.compile(r"FBdv:[0-9]{8}")
PMCID = re.compile(r"PMC[0-9]+")

#: the id pattern of each kind of term a prediction names
TERM_ID: dict[str, re.Pattern[str]] = {"go": GO_ID, "anatomy": FBBT_ID, "stage": FBDV_ID}


def well_formed(value: object, pattern: re.Pattern[str]) -> TypeGuard[str]:
    """Whether ``value`` is a string that ``pattern`` matches as a whole."""
    return isinstance(value, str) and pattern.fullmatch(value) is not None
