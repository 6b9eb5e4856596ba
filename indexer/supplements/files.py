"""An article's registry of supplementary files and their passages: the files its XML names
(``<supplementary-material xlink:href>``, with label, caption and media type) in document order, then the other files
of its package, each extracted (``indexer.supplements.extract``) and chunked (``indexer.supplements.chunks``) within
``Limits``. Whatever goes wrong with one file becomes its status and a one-line reason; it never fails the paper.
"""

from __future__ import annotations

import mimetypes
from pathlib import Path

from indexer.supplements.chunks import Budget, chunk_part
from indexer.supplements.extract import Unsupported, read, sniff
from indexer.supplements.guards import Refused
from indexer.supplements.limits import DEFAULT, Limits
from indexer.supplements.package import FileRef, Package
from search.core.models import Passage
from search.core.supplements import SupplementFile

_XLINK = "{http://www.w3.org/1999/xlink}href"
#: bytes of a label or caption kept in the registry
MAX_CAPTION_CHARS = 2000
#: characters of a header cell kept in the registry (the passages keep the cells whole)
MAX_HEADER_CELL_CHARS = 200


def _text(el) -> str | None:
    if el is None:
        return None
    text = " ".join(" ".join(el.itertext()).split())
    return text[:MAX_CAPTION_CHARS] or None


def _local(tag) -> str | None:
    return tag.rpartition("}")[2] if isinstance(tag, str) else None


def named_files(root) -> list[SupplementFile]:
    """The files an article's XML names, in document order (one entry per distinct href)."""
    out: list[SupplementFile] = []
    seen: set[str] = set()
    for el in root.iter():
        if _local(el.tag) != "supplementary-material":
            continue
        href = el.get(_XLINK)
        media = el
        if not href:   # the file is often on a <media> inside the element
            media = next((m for m in el.iter() if _local(m.tag) in ("media", "inline-supplementary-material")
                          and m.get(_XLINK)), None)
            href = media.get(_XLINK) if media is not None else None
        if not href or href in seen:
            continue
        seen.add(href)
        mime = "/".join(filter(None, (media.get("mimetype"), media.get("mime-subtype")))) or None
        out.append(SupplementFile(index=len(out) + 1, name=href.strip()[:300], label=_text(el.find("label")),
                                  caption=_text(el.find("caption")), media_type=mime, status="missing",
                                  reason="named by the article, not found in its package"))
    return out


def collect(pmcid: str, year: int | None, named: list[SupplementFile], package: Package | None,
            limits: Limits = DEFAULT) -> tuple[list[SupplementFile], list[Passage]]:
    """The registry (``named`` plus the package's other files when it owns them) with every found file extracted,
    and the passages of all of them."""
    files = list(named)
    refs: list[FileRef | None] = [package.lookup(f.name) if package else None for f in files]
    if package is not None and package.owns_all:
        used = {r.name for r in refs if r is not None}
        for name in sorted(package.files):
            if name not in used:
                files.append(SupplementFile(index=len(files) + 1, name=name[:300], origin="package",
                                            status="missing"))
                refs.append(package.files[name])
    passages: list[Passage] = []
    budget = Budget(limits.max_file_chars, limits.max_paper_chars)
    for n, (entry, ref) in enumerate(zip(files, refs, strict=True)):
        if n >= limits.max_files:
            entry.status, entry.reason = "too_large", f"the paper has over {limits.max_files} files: not read"
            continue
        if ref is None:
            continue
        entry.size = ref.size
        entry.media_type = entry.media_type or mimetypes.guess_type(ref.name)[0]
        if ref.refused is not None:
            entry.status, entry.reason = ref.refused  # type: ignore[assignment]
            continue
        budget.file_chars = limits.max_file_chars
        extract_file(pmcid, year, entry, ref.path, limits, budget, passages)
    return files, passages


def extract_file(pmcid: str, year: int | None, entry: SupplementFile, path: Path | None, limits: Limits,
                 budget: Budget, out: list[Passage]) -> None:
    """Extract one file into ``out``, setting its status, reason and parts."""
    entry.status, entry.reason = "ok", None
    if path is None:
        entry.status, entry.reason = "missing", "not readable in the package"
        return
    if entry.size is not None and entry.size > limits.max_file_bytes:
        entry.status, entry.reason = "too_large", f"{entry.size:,} bytes (limit {limits.max_file_bytes:,})"
        return
    if budget.paper_chars <= 0:
        entry.status, entry.reason = "partial", "the paper's supplements reached the text limit: not read"
        return
    try:
        for i, data in enumerate(read(path, sniff(path), limits)):
            if i >= limits.max_parts:
                raise Refused("partial", f"more than {limits.max_parts} sheets or tables: the rest not read")
            chunk_part(pmcid, year, entry, data, i, limits, budget, out)
    except Refused as r:
        entry.status, entry.reason = r.status, r.reason  # type: ignore[assignment]
        if entry.status != "partial":
            _drop(entry, out)
    except Unsupported as exc:
        entry.status, entry.reason = "unsupported", str(exc)
    except MemoryError:
        _drop(entry, out)
        entry.status, entry.reason = "too_large", "ran out of memory reading it"
    except Exception as exc:   # noqa: BLE001 - each reader library raises its own errors for damaged files
        entry.status = "partial" if entry.passages else "corrupt"
        entry.reason = f"{type(exc).__name__}: {' '.join(str(exc).split())[:150]}"
    for part in entry.parts:
        if part.header:
            part.header = [c[:MAX_HEADER_CELL_CHARS] for c in part.header]
    if entry.status == "ok" and not entry.passages:
        entry.reason = "no text in the file"


def _drop(entry: SupplementFile, out: list[Passage]) -> None:
    """Forget what a refused file added (a bomb found part-way is not indexed at all)."""
    out[:] = [p for p in out if p.supplement is None or p.supplement.file_index != entry.index]
    entry.parts, entry.passages, entry.chars = [], 0, 0
