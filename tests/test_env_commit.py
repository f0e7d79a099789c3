"""The commit a run's rows name (harness.env's git_commit)."""
from __future__ import annotations


def test_a_run_of_uncommitted_code_names_its_commit_as_dirty(tmp_path):
    """env's git_commit is HEAD's hash, with "+dirty" where tracked files differ from HEAD (a
    lent machine's copy whose .git is older than its files, or a developer's edits)."""
    import subprocess

    from harness.env import _git_commit

    def git(*args: str) -> str:
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
                              cwd=tmp_path, check=True, capture_output=True, text=True).stdout
    git("init", "-q")
    (tmp_path / "a.txt").write_text("one\n")
    git("add", "a.txt")
    git("commit", "-q", "-m", "one")
    head = git("rev-parse", "--short", "HEAD").strip()
    (tmp_path / "untracked.txt").write_text("results are not code\n")
    assert _git_commit(tmp_path) == head
    (tmp_path / "a.txt").write_text("two\n")
    assert _git_commit(tmp_path) == f"{head}+dirty"
