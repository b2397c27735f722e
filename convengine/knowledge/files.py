"""Finding the files to ingest under a folder someone else may write to, and reading them boundedly.

The folder is untrusted: a symbolic link may point anywhere (``env.txt -> /proc/self/environ``),
a "file" may be a FIFO that blocks its reader forever or a device, and a file may be swapped for
a link between the walk and the read. So the walk never follows links to folders; a link to a
file is followed only when its target lies inside the folder given; anything that is not a
regular file is skipped, each with the reason; and a file is opened without following a link,
checked to be the very file the walk found, and read no further than the size limit.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from convengine.catalog.errors import ConfigError, ErrorCode

TEXT_SUFFIXES = frozenset({".txt", ".text", ".md", ".markdown", ".rst"})
HTML_SUFFIXES = frozenset({".html", ".htm"})
PDF_SUFFIXES = frozenset({".pdf"})
SUFFIXES = TEXT_SUFFIXES | HTML_SUFFIXES | PDF_SUFFIXES
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


@dataclass(frozen=True, slots=True)
class Found:
    """A document to read: its source name (its path relative to the folder ingested, or to the root
    given), the file to open, and that file's identity."""

    source: str
    path: Path
    identity: tuple[int, int]


@dataclass(frozen=True, slots=True)
class Skipped:
    """Something under the folder that is not ingested, and why."""

    source: str
    reason: str

    def __str__(self) -> str:
        return f"{self.source}: {self.reason}"


def discover_files(paths: list[Path], root: Path | None = None) -> tuple[list[Found], list[Skipped]]:
    """Every document under ``paths`` (files as given, folders recursively, sorted) and what was skipped.

    A document's source is its path relative to ``root`` when given, else relative to the folder
    given (a file given alone: its name), so the same folder reached by another path (absolute,
    relative, through a link) names its documents the same.

    Raises:
        ConfigError: a path given does not exist, or lies outside ``root``.
    """
    found: list[Found] = []
    skipped: list[Skipped] = []
    base = Path(os.path.realpath(root)) if root is not None else None
    for path in paths:
        if not os.path.lexists(path):
            raise ConfigError(f"{path}: no such file or folder", code=ErrorCode.INVALID_INPUT)
        real = Path(os.path.realpath(path))
        if base is not None and not _inside(real, base):
            raise ConfigError(f"{path}: not inside the root {root}", code=ErrorCode.INVALID_INPUT)
        if path.is_dir():  # a folder given (even through a link) is the operator's choice
            _walk(path, base or real, found, skipped)
        else:
            _consider(path, Path(os.path.realpath(path.parent)), found, skipped, explicit=True,
                      source=_relative(real, base) if base is not None else path.name)
    return found, skipped


def _relative(path: Path, base: Path) -> str:
    return path.relative_to(base).as_posix()


def _walk(folder: Path, base: Path, found: list[Found], skipped: list[Skipped]) -> None:
    root = Path(os.path.realpath(folder))
    prefix = _relative(root, base)
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        dirnames.sort()
        inner = Path(dirpath).relative_to(folder)
        for name in list(dirnames):
            if os.path.islink(os.path.join(dirpath, name)):  # os.walk lists a link to a folder as a folder
                dirnames.remove(name)
                skipped.append(Skipped(_name(prefix, inner, name), "a symbolic link to a folder is not followed"))
        for name in sorted(filenames):
            _consider(Path(dirpath, name), root, found, skipped, explicit=False, source=_name(prefix, inner, name))


def _name(prefix: str, inner: Path, name: str) -> str:
    return Path(prefix, inner, name).as_posix().removeprefix("./")


def _consider(path: Path, root: Path, found: list[Found], skipped: list[Skipped], *, explicit: bool,
              source: str) -> None:
    target = path
    if path.is_symlink():
        target = Path(os.path.realpath(path))
        if not _inside(target, root):
            skipped.append(Skipped(source, "a symbolic link to something outside the folder is not followed"))
            return
    try:
        info = os.stat(target, follow_symlinks=False)
    except OSError as exc:
        skipped.append(Skipped(source, f"cannot be examined ({exc.strerror or exc})"))
        return
    if not stat.S_ISREG(info.st_mode):
        skipped.append(Skipped(source, f"not a regular file ({_kind(info.st_mode)})"))
        return
    if not explicit and target.suffix.lower() not in SUFFIXES:
        return  # other files in a folder (images...) are not documents
    found.append(Found(source, target, (info.st_dev, info.st_ino)))


def _inside(target: Path, root: Path) -> bool:
    return target == root or root in target.parents


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "an unknown kind of file"


def read_bounded(item: Found, max_bytes: int) -> bytes:
    """The file's bytes: opened without following a link, only if it is still the regular file the
    walk found, and never read past ``max_bytes``.

    Raises:
        ConfigError: the file changed, is not a regular file, or is larger than ``max_bytes``.
    """
    try:
        fd = os.open(item.path, _OPEN_FLAGS)
    except OSError as exc:
        raise ConfigError(f"{item.source}: cannot be opened ({exc.strerror or exc})",
                          code=ErrorCode.INVALID_INPUT) from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or (info.st_dev, info.st_ino) != item.identity:
            raise ConfigError(f"{item.source}: changed while being ingested (no longer the regular file found)",
                              code=ErrorCode.INVALID_INPUT)
        os.set_blocking(fd, True)
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ConfigError(f"{item.source}: larger than {max_bytes} bytes (knowledge.ingest.max_file_bytes)",
                          code=ErrorCode.INVALID_INPUT)
    return data
