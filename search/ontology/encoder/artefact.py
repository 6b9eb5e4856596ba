"""The term encoder's artefact in the data dir: one folder per trained version, the current one named by a small
file, each written completely before it is named (a failed or interrupted training never replaces a live one)::

    <data_dir>/term-encoder/
        CURRENT                          {"version": "te-20261205T101500-1a2b3c4d"}, replaced atomically
        versions/<version>/
            manifest.json                what was trained on what, and how well it does (below)
            model/                       the fine-tuned sentence-transformers model (safetensors, tokenizer, config)
            model-int8.onnx              the whole encoder (transformer, pooling, normalisation) as one ONNX graph,
                                         weights dynamically quantised to int8: what queries are embedded with
            vectors/<ontology>.npy       float16, labels × dim: every live term's name and synonyms, unit length
            vectors/<ontology>.rows.npy  int32, labels × 2: the term number and k (0 the name, k its k-th synonym)
            vectors/<ontology>.ids.json  {"ids": [...], "aspects": "PFC-…"}: the term numbers' ids and GO aspects
            vectors/<ontology>.hnsw      a FAISS HNSW graph over the vectors, for ontologies above EXACT_MAX labels
        partial/                         the checkpoint of a training in progress (train.py), resumed when it fits
        staging-<pid>/                   a version being written

The manifest (``format`` 1) records the base model, the seed and every training setting, per ontology its data
version, the digest of the labels the vectors were made from (:attr:`LabelTable.digest`), term and label counts
and the held-out term ids (test and dev), the pairs and hard negatives per epoch, timings (wall and CPU) and the
encoder-alone held-out metrics. Nothing here is a pickle: JSON, ``.npy`` read with ``allow_pickle=False``,
safetensors, ONNX (protobuf) and FAISS's own format. A version name read from CURRENT is checked against
:data:`VERSION_PATTERN` before it names a folder.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from search.core.names import check_ontology
from search.ontology.encoder import CURRENT, ROOT

FORMAT = 1
KIND = "flysift-term-encoder"
VERSIONS = "versions"
PARTIAL = "partial"
MANIFEST = "manifest.json"
MODEL_DIR = "model"
ONNX_FILE = "model-int8.onnx"
VECTORS_DIR = "vectors"
VERSION_PATTERN = re.compile(r"te-[0-9]{8}T[0-9]{6}-[0-9a-f]{8}")
MAX_MANIFEST_BYTES = 16 << 20
MAX_CURRENT_BYTES = 4096
#: label counts above which an ontology's vectors are searched through an HNSW graph instead of one matrix product
#: (GO's ~160,000 labels × 384 float32 is ~250 MB per query scan: ~15 ms; FBbt's ~15,000 take ~1 ms)
EXACT_MAX = 50_000
#: versions kept: the current one and the one before (to go back by rewriting CURRENT)
KEEP = 2


class OntologyEntry(BaseModel):
    """What the service checks before it serves an ontology's vectors."""

    model_config = ConfigDict(extra="allow")

    data_version: str | None = None
    digest: str = Field(pattern=r"^[0-9a-f]{32}$")
    terms: int = Field(ge=0, le=10_000_000)
    labels: int = Field(ge=0, le=50_000_000)
    index: Literal["exact", "hnsw"] = "exact"
    #: the cosine's weight in hybrid term search (search.ontology.encoder.fusion), tuned on this version's dev terms
    #: and recorded here by ``bench/bench_ontology.py --dev --weights … --record``; None: fusion.DEFAULT_WEIGHT
    fusion_weight: float | None = Field(default=None, ge=0.0, le=100.0)


class Manifest(BaseModel):
    """The manifest's fields the service relies on (the rest, training details and metrics, is kept as written)."""

    model_config = ConfigDict(extra="allow")

    format: Literal[1]
    kind: Literal["flysift-term-encoder"]
    version: str = Field(pattern=VERSION_PATTERN.pattern)
    dim: int = Field(ge=1, le=4096)
    max_seq_length: int = Field(ge=4, le=512)
    ontologies: dict[str, OntologyEntry]


def root(data_dir: Path | str) -> Path:
    return Path(data_dir) / ROOT


def version_dir(data_dir: Path | str, version: str) -> Path:
    if not VERSION_PATTERN.fullmatch(version):
        raise ValueError(f"not a term encoder version: {version[:60]!r}")
    return root(data_dir) / VERSIONS / version


def current_version(data_dir: Path | str) -> str | None:
    """The version CURRENT names (checked), or None when there is no encoder; ``ValueError`` for a damaged file."""
    path = root(data_dir) / CURRENT
    try:
        if path.stat().st_size > MAX_CURRENT_BYTES:
            raise ValueError(f"{path}: larger than {MAX_CURRENT_BYTES} bytes")
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, RecursionError) as e:
        raise ValueError(f"{path}: unreadable ({type(e).__name__})") from None
    except json.JSONDecodeError:
        raise ValueError(f"{path}: not JSON") from None
    version = data.get("version") if isinstance(data, dict) else None
    if not isinstance(version, str) or not VERSION_PATTERN.fullmatch(version):
        raise ValueError(f"{path}: no valid version in it")
    return version


def read_manifest(folder: Path) -> tuple[Manifest, dict[str, Any]]:
    """The checked manifest of a version folder and its full JSON; ``ValueError`` naming the file and the check."""
    path = folder / MANIFEST
    try:
        if path.stat().st_size > MAX_MANIFEST_BYTES:
            raise ValueError(f"{path}: larger than {MAX_MANIFEST_BYTES} bytes")
        data = json.loads(path.read_bytes())
    except (OSError, UnicodeDecodeError, RecursionError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: unreadable ({type(e).__name__}: {str(e)[:120]})") from None
    from pydantic import ValidationError

    try:
        manifest = Manifest.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ValueError(f"{path}: {where}: {first['msg'][:120]}") from None
    for name in manifest.ontologies:
        check_ontology(name)
    if manifest.version != folder.name:
        raise ValueError(f"{path}: names version {manifest.version}, the folder is {folder.name[:60]}")
    return manifest, data


def vector_paths(folder: Path, name: str) -> dict[str, Path]:
    """The vector files of ontology ``name`` (a checked name, never a path) in a version folder."""
    name = check_ontology(name)
    d = folder / VECTORS_DIR
    return {"vectors": d / f"{name}.npy", "rows": d / f"{name}.rows.npy", "ids": d / f"{name}.ids.json",
            "hnsw": d / f"{name}.hnsw"}


def staging(data_dir: Path | str) -> Path:
    """A fresh folder to write a version into (removed by :func:`publish` or by the next training)."""
    base = root(data_dir)
    base.mkdir(parents=True, exist_ok=True)
    for old in base.glob("staging-*"):
        try:
            pid = int(old.name.split("-", 1)[1])
            os.kill(pid, 0)            # a training still writing it
        except (ValueError, ProcessLookupError):
            shutil.rmtree(old, ignore_errors=True)
        except PermissionError:
            pass
    folder = Path(tempfile.mkdtemp(prefix=f"staging-{os.getpid()}-", dir=base))
    folder.chmod(0o755)   # mkdtemp makes it private; the service may run as another user
    return folder


def write_json(path: Path, data: Any) -> None:
    """JSON written to a temporary name and renamed: a reader sees the old file or the new one."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, indent=1)
        os.chmod(tmp, 0o644)   # mkstemp makes it private; the service may run as another user
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def publish(data_dir: Path | str, folder: Path, version: str) -> Path:
    """Move a completely written version folder into place, name it in CURRENT, and drop versions beyond
    :data:`KEEP`. Returns the version's folder."""
    dest = version_dir(data_dir, version)
    dest.parent.mkdir(parents=True, exist_ok=True)
    os.replace(folder, dest)
    write_json(root(data_dir) / CURRENT, {"version": version})
    kept = sorted((p for p in dest.parent.iterdir() if VERSION_PATTERN.fullmatch(p.name)), reverse=True)
    for old in kept[KEEP:]:
        if old.name != version:
            shutil.rmtree(old, ignore_errors=True)
    return dest


def size_of(folder: Path) -> dict[str, int]:
    """Bytes per part of a version folder (model, onnx, vectors, total)."""
    sizes = {"model": 0, "onnx": 0, "vectors": 0}
    for p in folder.rglob("*"):
        if p.is_file():
            part = p.relative_to(folder).parts[0]
            key = "model" if part == MODEL_DIR else "onnx" if part == ONNX_FILE else \
                "vectors" if part == VECTORS_DIR else None
            if key:
                sizes[key] += p.stat().st_size
    sizes["total"] = sum(sizes.values())
    return sizes


def stale_note(data_dir: Path | str, ontology: Any) -> str | None:
    """A line for ``flysift index ontology``: the data dir's term encoder was trained on another version of the
    ontology just indexed (term search then falls back to the lexical ranking for it until it is retrained)."""
    from search.ontology.encoder.labels import LabelTable

    try:
        version = current_version(data_dir)
        if version is None:
            return None
        manifest, _ = read_manifest(version_dir(data_dir, version))
    except ValueError as e:
        return f"note: the term encoder in {data_dir} cannot be read ({str(e)[:120]})"
    entry = manifest.ontologies.get(ontology.name)
    if entry is None or entry.digest == LabelTable.of(ontology).digest:
        return None
    return (f"note: the term encoder {version} was trained on {ontology.name} {entry.data_version}; term search uses "
            f"the lexical ranking for {ontology.name} until `flysift train term-encoder` is run again")
