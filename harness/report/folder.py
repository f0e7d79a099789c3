"""The report's folder: where a report may write, and which files it may delete.

A report deletes only files that an earlier report wrote. The manifest it leaves in its folder
(MANIFEST, relative POSIX paths) is how it knows which ones. Why: the report used to clear every
figures/*.png it found, so `convbench report --out ~/photos` deleted the user's pictures.
"""
from __future__ import annotations

import json
import os
from pathlib import Path, PurePosixPath

MANIFEST = ".convbench-report.json"
WRITTEN_BY = "convbench report"


class FolderRefused(ValueError):
    """A folder the report will not write into; the message names it and says why."""


def open_folder(out: Path, force: bool, inner: str) -> list[str]:
    """Check and create the report folder and its folder `inner`; return what the earlier
    report there wrote.

    Refuses the filesystem root and the home folder even with `force`. Refuses a folder that
    already holds something but no report manifest, unless `force`. A symlink to a folder is
    written through, so the link itself stays as it is.
    """
    refuse_root_and_home(out)
    if out.is_symlink() and not out.exists():
        raise FolderRefused(f"{out} is a link to {os.readlink(out)}, which does not exist; "
                            "a report needs a folder")
    if out.exists() and not out.is_dir():
        raise FolderRefused(f"{out} is not a folder; a report is a folder (index.html, "
                            "index.md, figures/)")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:    # a file on the way, no permission, a read-only disk
        raise FolderRefused(f"cannot make the report folder {out}: "
                            f"{err.strerror or type(err).__name__}") from None
    manifest = out / MANIFEST
    if manifest.exists() or manifest.is_symlink():
        try:
            earlier = _read(manifest)
        except FolderRefused:
            if not force:
                raise
            earlier = []      # an unreadable list names nothing we may delete
    elif any(out.iterdir()) and not force:
        raise FolderRefused(f"{out} is not empty and holds no convbench report ({MANIFEST}); "
                            "name an empty or new folder, or pass --force to write the report "
                            "beside its files (none of them is deleted)")
    else:
        earlier = []
    if (out / inner).exists() and not (out / inner).is_dir():
        raise FolderRefused(f"{out / inner} is not a folder; the report draws its figures there")
    if (out / inner).is_symlink() and not (out / inner).resolve().is_relative_to(out.resolve()):
        # drawing through it would overwrite same-named files of someone else's folder
        raise FolderRefused(f"{out / inner} links to {(out / inner).resolve()}, outside the "
                            "report's folder; the report draws its figures only inside it")
    try:
        (out / inner).mkdir(exist_ok=True)
        # Marks the folder as a report's at once: a run stopped while drawing leaves a folder
        # the next run may write into without --force (it still deletes only what is listed).
        _write(manifest, earlier)
    except OSError as err:    # a read-only folder, another user's
        raise FolderRefused(f"cannot write into the report folder {out}: "
                            f"{err.strerror or type(err).__name__}") from None
    return earlier


def close_folder(out: Path, written: list[str], earlier: list[str]) -> None:
    """Record what this report wrote, then delete what only the earlier report wrote."""
    stale = sorted(set(earlier) - set(written))
    # Both lists first: should deleting stop half way, the next run still knows every file.
    _write(out / MANIFEST, sorted(set(earlier) | set(written)))
    inside = out.resolve()
    for name in stale:
        path = out / name
        # A listed name under a folder since replaced by a link may lead outside: never there.
        if not path.parent.resolve().is_relative_to(inside):
            continue
        if path.is_symlink() or path.is_file():
            path.unlink(missing_ok=True)
    _write(out / MANIFEST, sorted(written))


def refuse_root_and_home(out: Path) -> None:
    """FolderRefused for the filesystem root and the home folder (links followed): a report
    there would scatter its files among everything else."""
    target = out.resolve()
    if target == Path(target.anchor):
        raise FolderRefused(f"{out} is the filesystem root; a report needs a folder of its own "
                            "(name one with --out)")
    try:
        home = Path.home().resolve()
    except (RuntimeError, KeyError):     # no HOME and no password entry: there is no home
        return
    if target == home:
        raise FolderRefused(f"{out} is your home folder; a report needs a folder of its own "
                            "(name one with --out)")


def _read(manifest: Path) -> list[str]:
    why = ""
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as err:
        data, why = None, f"{type(err).__name__}: {err}"
    files = data.get("files") if isinstance(data, dict) else None
    if not why and (not isinstance(files, list) or data.get("written_by") != WRITTEN_BY):
        why = f'expected {{"written_by": "{WRITTEN_BY}", "files": [...]}}'
    bad = [] if why else [name for name in files if not _relative_inside(name)]
    if bad:
        why = f"{bad[0]!r} is not a relative path inside the folder"
    if why:
        raise FolderRefused(f"{manifest} is not a convbench report manifest ({why}); pass "
                            "--force to write the report beside the folder's files (none of "
                            "them is deleted)")
    return list(dict.fromkeys(files))


def _relative_inside(name: object) -> bool:
    """A path a manifest may list: relative, below the folder, never the manifest itself."""
    if not isinstance(name, str) or not name or "\\" in name or "\0" in name:
        return False
    path = PurePosixPath(name)      # "./a", "a//b" and "." differ from str(path): refused
    return (not path.is_absolute() and ".." not in path.parts and str(path) == name
            and name not in (".", MANIFEST))


def _write(manifest: Path, files: list[str]) -> None:
    write_text(manifest, json.dumps({"written_by": WRITTEN_BY, "files": files}, indent=1) + "\n")


def write_text(path: Path, text: str) -> None:
    """Written aside and renamed: never half a file, and a link at `path` is replaced rather
    than written through (it could lead to any file of the user's)."""
    part = path.with_name(path.name + ".part")
    part.write_text(text, encoding="utf-8")
    os.replace(part, path)
