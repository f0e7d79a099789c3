"""Where a report may write and what it may delete (issue 37): only files an earlier report listed
in its manifest are ever deleted; a folder of someone else's files is refused without --force, and
the filesystem root and the home folder always."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from harness import store
from harness.cli import main
from harness.report import FolderRefused, folder, render_report

try:  # tests/ is a plain folder on sys.path, or a package when someone adds __init__.py
    from report_fixtures import cpu_frame, gpu_frame
except ImportError:
    from tests.report_fixtures import cpu_frame, gpu_frame


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    return cpu_frame()


def _files(out: Path) -> set[str]:
    return {p.relative_to(out).as_posix() for p in out.rglob("*") if not p.is_dir()}


def _listed(out: Path) -> set[str]:
    return set(json.loads((out / folder.MANIFEST).read_text())["files"])


def _photos(out: Path) -> dict[Path, bytes]:
    """Someone's own files where a report puts its own."""
    (out / "figures").mkdir(parents=True)
    photos = {out / "figures" / "cat.png": b"\x89PNG cat", out / "figures" / "dog.png": b"dog",
              out / "notes.txt": b"mine"}
    for path, data in photos.items():
        path.write_bytes(data)
    return photos


def _intact(photos: dict[Path, bytes]) -> bool:
    return all(path.read_bytes() == data for path, data in photos.items())


def _one_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


# ---- through the command line --------------------------------------------------------------------
def test_a_folder_of_someone_elses_files_is_refused_and_kept(tmp_path: Path, frame, capsys):
    results = tmp_path / "r.parquet"
    store.write(frame, results)
    out = tmp_path / "photos"
    photos = _photos(out)
    assert main(["report", str(results), "--out", str(out), "--jobs", "1"]) == 2
    line = _one_error(capsys)
    assert str(out) in line and "--force" in line and "beside" in line, line
    assert _intact(photos) and _files(out) == {"figures/cat.png", "figures/dog.png", "notes.txt"}

    # --force writes the report beside them, deletes none, and lists only its own files
    assert main(["report", str(results), "--out", str(out), "--jobs", "1", "--force"]) == 0
    assert _intact(photos)
    assert _listed(out) == _files(out) - {"figures/cat.png", "figures/dog.png", "notes.txt",
                                          folder.MANIFEST}
    assert {"index.html", "index.md"} <= _listed(out)


@pytest.mark.parametrize("where", ["root", "home"])
def test_the_root_and_the_home_folder_are_refused_even_with_force(tmp_path: Path, frame, where,
                                                                   monkeypatch, capsys):
    home = tmp_path / "home"
    photos = _photos(home)
    monkeypatch.setenv("HOME", str(home))
    out = Path("/") if where == "root" else home
    results = tmp_path / "r.parquet"
    store.write(frame, results)

    def written(*args, **kwargs):       # the check must come before any write: never try one
        raise AssertionError(f"the report began writing into {out}")
    if where == "root":
        monkeypatch.setattr(Path, "mkdir", written)
        monkeypatch.setattr(folder, "write_text", written)
    assert main(["report", str(results), "--out", str(out), "--jobs", "1", "--force"]) == 2
    line = _one_error(capsys)
    assert str(out) in line and ("root" if where == "root" else "home folder") in line, line
    assert _intact(photos) and not (home / folder.MANIFEST).exists()


def test_reports_of_several_gpus_are_refused_the_home_folder_too(tmp_path: Path, monkeypatch,
                                                                 capsys):
    # Rows of two GPU models: each report goes to a subfolder of --out, so --out itself is
    # never rendered into; the home folder must still be refused before any subfolder appears.
    home = tmp_path / "home"
    photos = _photos(home)
    monkeypatch.setenv("HOME", str(home))
    h200 = gpu_frame()
    h100 = h200.assign(env_gpu_name="NVIDIA H100 80GB HBM3")
    results = tmp_path / "r.parquet"
    store.write(pd.concat([h100, h200], ignore_index=True), results)
    assert main(["report", str(results), "--out", str(home), "--jobs", "1", "--force"]) == 2
    assert "home folder" in _one_error(capsys)
    assert _intact(photos) and sorted(p.name for p in home.iterdir()) == ["figures", "notes.txt"]


def test_an_empty_out_is_refused_not_taken_for_the_default(tmp_path: Path, frame, monkeypatch,
                                                          capsys):
    monkeypatch.chdir(tmp_path)
    results = tmp_path / "r.parquet"
    store.write(frame, results)
    assert main(["report", str(results), "--out", "", "--jobs", "1"]) == 2
    assert "--out" in _one_error(capsys) and not (tmp_path / "reports").exists()


def test_a_figures_link_out_of_the_folder_is_refused(tmp_path: Path, frame, capsys):
    # Drawing through it would overwrite a same-named file in someone else's folder.
    results, out, outside = tmp_path / "r.parquet", tmp_path / "rep", tmp_path / "outside"
    store.write(frame, results)
    assert main(["report", str(results), "--out", str(out), "--jobs", "1"]) == 0
    outside.mkdir()
    theirs = {outside / name: b"theirs" for name in _listed(out) if name.startswith("figures/")
              for name in [name.removeprefix("figures/")]}
    for path, data in theirs.items():
        path.write_bytes(data)
    for png in (out / "figures").iterdir():
        png.unlink()
    (out / "figures").rmdir()
    (out / "figures").symlink_to(outside)
    assert main(["report", str(results), "--out", str(out), "--jobs", "1", "--force"]) == 2
    assert "outside the report's folder" in _one_error(capsys)
    assert theirs and _intact(theirs)


def test_a_link_to_nowhere_is_one_line_not_a_traceback(tmp_path: Path, frame, capsys):
    results = tmp_path / "r.parquet"
    store.write(frame, results)
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "gone")
    assert main(["report", str(results), "--out", str(link), "--jobs", "1"]) == 2
    assert "does not exist" in _one_error(capsys)
    assert link.is_symlink() and not (tmp_path / "gone").exists()


# ---- the library --------------------------------------------------------------------------------
def test_a_rerender_deletes_only_what_the_earlier_report_wrote(tmp_path: Path, frame) -> None:
    out = tmp_path / "report"
    first = render_report(gpu_frame("small"), out)
    assert _listed(out) == _files(out) - {folder.MANIFEST}
    photos = {out / "figures" / "cat.png": b"cat", out / "mine.md": b"mine"}
    for path, data in photos.items():      # put there by hand after the first report
        path.write_bytes(data)
    second = render_report(frame, out)     # its own folder: no --force needed
    gone = {p.name for p in first.figures} - {p.name for p in second.figures}
    assert gone and not any((out / "figures" / name).exists() for name in gone)
    assert _intact(photos)
    assert _files(out) == _listed(out) | {folder.MANIFEST, "figures/cat.png", "mine.md"}


def test_a_link_to_a_folder_is_written_through_and_kept(tmp_path: Path, frame) -> None:
    target = tmp_path / "target"
    target.mkdir()
    link = tmp_path / "link"
    link.symlink_to(target, target_is_directory=True)
    render_report(frame, link)
    render_report(frame, link)
    assert link.is_symlink() and (target / "index.html").is_file()
    assert _listed(target) == _files(target) - {folder.MANIFEST}


def test_a_link_in_the_report_is_replaced_not_written_through(tmp_path: Path, frame) -> None:
    out = tmp_path / "report"
    render_report(frame, out)
    elsewhere = tmp_path / "elsewhere.html"
    elsewhere.write_text("someone's page")
    (out / "index.html").unlink()
    (out / "index.html").symlink_to(elsewhere)
    render_report(frame, out)
    assert elsewhere.read_text() == "someone's page"
    assert not (out / "index.html").is_symlink()


@pytest.mark.parametrize("listed", ["../victim.txt", "/tmp/victim.txt", "./x", "", 7, "a/../b"])
def test_a_manifest_naming_files_outside_is_refused(tmp_path: Path, frame, listed) -> None:
    out = tmp_path / "report"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    (out / folder.MANIFEST).write_text(json.dumps({"written_by": folder.WRITTEN_BY,
                                                   "files": [listed]}))
    with pytest.raises(FolderRefused, match="not a convbench report manifest.*--force"):
        render_report(frame, out)
    render_report(frame, out, force=True)      # then it deletes nothing it did not write
    assert victim.read_text() == "keep"


def test_a_listed_file_behind_a_link_to_elsewhere_is_kept(tmp_path: Path, frame) -> None:
    out = tmp_path / "report"
    render_report(frame, out)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "old.png").write_text("not the report's")
    (out / "sub").symlink_to(outside, target_is_directory=True)
    manifest = json.loads((out / folder.MANIFEST).read_text())
    manifest["files"].append("sub/old.png")
    (out / folder.MANIFEST).write_text(json.dumps(manifest))
    render_report(frame, out)
    assert (outside / "old.png").read_text() == "not the report's"


def test_a_file_in_the_way_of_figures_is_refused(tmp_path: Path, frame) -> None:
    out = tmp_path / "report"
    out.mkdir()
    (out / "figures").write_text("a file")
    with pytest.raises(FolderRefused, match="figures is not a folder"):
        render_report(frame, out, force=True)
    assert (out / "figures").read_text() == "a file"
