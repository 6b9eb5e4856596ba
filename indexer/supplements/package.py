"""Where an article's supplementary files are: the folder it sits in (a PMC package directory) or the ``.tar.gz``
package it came in. Files are found by listing, and a name the article gives is *looked up* in that listing, never
joined into a path: ``xlink:href="../../etc/passwd"`` finds nothing. Links, devices and members whose names climb
out of the package are listed as ``refused``, never read.

A folder counts as a package of one article when it holds exactly one article XML: then every other file in it is
that article's (``origin: package`` when the article does not name it). In a folder of many articles (CRAFT's
``articles/``) only the files an article names are its own.
"""

from __future__ import annotations

import os
import stat
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from indexer.supplements.guards import safe_member_name
from indexer.supplements.limits import Limits

#: files beside an article that are documentation or the article itself, never supplements
_NOT_SUPPLEMENTS = (".nxml", ".xml", ".md", ".rst", ".cff")
_DOC_NAMES = ("readme", "license", "licence", "citation", "notice", "copying")
ARTICLE_SUFFIXES = (".nxml", ".xml")
#: the most bytes of an article XML read from a package
MAX_ARTICLE_BYTES = 64 << 20


@dataclass
class FileRef:
    """A file of a package: where its bytes are (None: not readable), its size, or why it is refused."""

    name: str
    path: Path | None = None
    size: int | None = None
    refused: tuple[str, str] | None = None   # (status, reason)


@dataclass
class Package:
    """The files of one article's package by name, and whether unnamed ones are the article's too."""

    files: dict[str, FileRef] = field(default_factory=dict)
    owns_all: bool = False
    problems: list[str] = field(default_factory=list)

    def lookup(self, href: str) -> FileRef | None:
        """The file an ``xlink:href`` names: its last path component, looked up (case-sensitively, then not)."""
        name = PurePosixPath(href.replace("\\", "/")).name
        if not name or name in (".", ".."):
            return None
        found = self.files.get(name)
        if found is None:
            lowered = {k.lower(): v for k, v in self.files.items()}
            found = lowered.get(name.lower())
        return found


def is_supplement_name(name: str) -> bool:
    """Whether a file beside an article can be one of its supplements (not the XML, hidden files or documents)."""
    low = name.lower()
    return not (low.startswith(".") or low.endswith(_NOT_SUPPLEMENTS) or low.startswith(_DOC_NAMES))


def folder_package(article: Path, single: bool) -> Package:
    """The files beside ``article`` (``single``: the folder holds no other article)."""
    pkg = Package(owns_all=single)
    try:
        entries = list(os.scandir(article.parent))
    except OSError as exc:
        pkg.problems.append(f"cannot list the article's folder ({exc.strerror})")
        return pkg
    for entry in entries:
        if entry.name == article.name or not is_supplement_name(entry.name):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISLNK(st.st_mode):
            pkg.files[entry.name] = FileRef(entry.name, refused=("refused", "a symbolic link: not followed"))
        elif stat.S_ISREG(st.st_mode):
            pkg.files[entry.name] = FileRef(entry.name, Path(entry.path), st.st_size)
    return pkg


@contextmanager
def tar_package(path: Path, limits: Limits) -> Iterator[tuple[bytes | None, str | None, Package]]:
    """(article XML bytes, its member name, the package) of a ``.tar.gz`` package; members are copied into a
    temporary folder under names of our own, and removed on exit. Unsafe members are listed as refused."""
    pkg = Package(owns_all=True)
    article: bytes | None = None
    article_name: str | None = None
    declared = 0
    with tempfile.TemporaryDirectory(prefix="flysift-pkg-") as tmp:
        try:
            with tarfile.open(path, "r:*") as tar:
                for n, member in enumerate(tar):
                    if n >= limits.max_package_members:
                        pkg.problems.append(f"more than {limits.max_package_members:,} members: the rest not read")
                        break
                    base = PurePosixPath(member.name).name
                    declared += max(member.size, 0)
                    if declared > limits.max_package_bytes:   # checked before the member's data is skipped
                        pkg.problems.append(f"members over {limits.max_package_bytes:,} bytes: the rest not read")
                        break
                    if member.isdir():
                        continue
                    if why := safe_member_name(member.name):
                        pkg.files[base or f"member-{n}"] = FileRef(base, refused=("refused", f"archive member with "
                                                                                  f"{why}: not read"))
                        continue
                    if not member.isreg():
                        pkg.files[base] = FileRef(base, refused=("refused", "a link or device in the archive: "
                                                                 "not read"))
                        continue
                    if base.lower().endswith(ARTICLE_SUFFIXES) and article is None \
                            and member.size <= MAX_ARTICLE_BYTES:
                        fh = tar.extractfile(member)
                        article, article_name = (fh.read(MAX_ARTICLE_BYTES) if fh else b""), base
                        continue
                    if not is_supplement_name(base):
                        continue
                    if member.size > limits.max_file_bytes:
                        pkg.files[base] = FileRef(base, size=member.size, refused=(
                            "too_large", f"{member.size:,} bytes (limit {limits.max_file_bytes:,})"))
                        continue
                    target = Path(tmp) / f"{n}{_suffix(base)}"
                    fh = tar.extractfile(member)
                    if fh is None:
                        continue
                    with open(target, "wb") as out:
                        _copy(fh, out, member.size)
                    pkg.files[base] = FileRef(base, target, member.size)
        except (tarfile.TarError, OSError, EOFError, ValueError) as exc:
            pkg.problems.append(f"the package is damaged ({str(exc)[:100]}): members after it not read")
        yield article, article_name, pkg


def _suffix(name: str) -> str:
    """A member's suffix, kept only when it is a plain one (readers choose by it)."""
    suffix = PurePosixPath(name).suffix.lower()
    return suffix if suffix[1:].isalnum() and len(suffix) <= 6 else ""


def _copy(src, dst, size: int) -> None:
    left = size
    while left > 0 and (chunk := src.read(min(left, 1 << 20))):
        dst.write(chunk)
        left -= len(chunk)
