"""No run ever destroys another (issue 12): every run owns its file, a second writer is refused,
a torn or garbage journal line is skipped and reported, a corrupted results file is refused,
and every failure is one line with the contract's exit code."""
from __future__ import annotations

import errno
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from harness import runs, store
from harness.cli import main
from harness.locks import OutputBusy, OutputLock

TESTS = Path(__file__).parent
SUITE = ("name = 'tiny'\nlayers = ['mb2ic4ih8oc4oh8kh3ph1n\"a\"', 'mb2ic4ih6oc4oh6kh3ph1n\"b\"']\n"
         "[sweep]\ndirections = ['fwd', 'bwd_data']\n[[sweep.backends]]\nname = 'fake'\n"
         "algorithms = ['exact']\n[timing]\nbudget_ms = 1\n")
POINTS = 4


def _suite(tmp_path: Path, text: str = SUITE) -> str:
    path = tmp_path / "tiny.toml"
    path.write_text(text)
    return str(path)


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("convbench: error:"), err
    assert "Traceback" not in err[0]
    return err[0]


def _convbench(args: list[str], cwd: Path, backend: str = "slow") -> subprocess.Popen:
    """convbench in a child process, with a planted backend registered as it is in the tests."""
    code = ("import sys; from harness import backends; "
            "backends.register('fake', 'harness.backends.fake:FakeBackend'); "
            "backends.register('slow', 'planted_backends:SlowBackend'); "
            "from harness.cli import main; sys.exit(main(sys.argv[1:]))")
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), str(TESTS.parent)])}
    return subprocess.Popen([sys.executable, "-c", code, *args], cwd=cwd, env=environ,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


# ---- a run owns its output ----------------------------------------------------------------------
def test_two_default_runs_in_a_row_keep_both_runs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    suite = _suite(tmp_path)
    assert main(["run", suite]) == 0
    assert main(["run", suite]) == 0
    files = sorted((tmp_path / "results").glob("tiny-*.parquet"))
    assert len(files) == 2, files
    frames = [store.load(f) for f in files]
    assert [len(f) for f in frames] == [POINTS, POINTS]
    assert frames[0]["run_id"].iloc[0] != frames[1]["run_id"].iloc[0]
    assert f"wrote {POINTS} rows to" in capsys.readouterr().out


def test_an_existing_out_is_refused_unless_resume_append_or_force(tmp_path, capsys):
    suite, out = _suite(tmp_path), tmp_path / "r.parquet"
    assert main(["run", suite, "--out", str(out)]) == 0
    before = store.load(out)
    capsys.readouterr()
    assert main(["run", suite, "--out", str(out)]) == 2
    assert "--append" in _one_error_line(capsys)
    pd.testing.assert_frame_equal(store.load(out), before)          # untouched

    assert main(["run", suite, "--out", str(out), "--append"]) == 0
    appended = store.load(out)
    assert len(appended) == 2 * POINTS and appended["run_id"].nunique() == 2
    assert "(8 rows in the file)" in capsys.readouterr().out

    assert main(["run", suite, "--out", str(out), "--force"]) == 0
    replaced = store.load(out)
    assert len(replaced) == POINTS and replaced["run_id"].nunique() == 1
    assert not set(replaced["run_id"]) & set(appended["run_id"])
    assert main(["run", suite, "--out", str(out), "--force", "--append"]) == 2


def test_rerun_without_resume_after_a_crash_keeps_the_crashed_rows(tmp_path, capsys):
    suite, out = _suite(tmp_path), tmp_path / "r.parquet"
    journal = store.journal_path(out)
    assert main(["run", suite, "--out", str(out)]) == 0
    rows = store.load(out)
    out.unlink()
    journal.write_text("".join(store.json.dumps(r, default=str) + "\n"
                               for r in rows.head(2).to_dict("records")))
    kept = journal.read_bytes()
    capsys.readouterr()
    assert main(["run", suite, "--out", str(out)]) == 2
    assert "unfinished run" in _one_error_line(capsys)
    assert journal.read_bytes() == kept


def test_check_never_mixes_in_rows_of_earlier_checks(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    suite = _suite(tmp_path)
    assert main(["run", suite, "--out", "base.parquet"]) == 0
    for _ in range(2):
        assert main(["check", suite, "--baseline", "base.parquet", "--min-samples", "3"]) in (0, 1)
    checks = sorted((tmp_path / "results").glob("tiny-*-check.parquet"))
    assert len(checks) == 2 and all(len(store.load(c)) == POINTS for c in checks)


# ---- names never become paths -------------------------------------------------------------------
@pytest.mark.parametrize("name", ["../../esc", "a/b", "..", "/etc/x", "C:\\x", ""])
def test_a_run_file_stays_inside_the_results_folder(name):
    path = runs.new_run_path(name, {"gpu_name": "../x"}, runs.new_run_id())
    assert path.parent == runs.RESULTS_DIR and "/" not in path.name and "\\" not in path.name
    assert not path.name.startswith(".")


@pytest.mark.parametrize("out, named", [("x.txt", "x.txt"), ("folder", "folder")])
def test_bad_out_is_refused_before_measuring(tmp_path, capsys, out, named):
    (tmp_path / "folder").mkdir()
    assert main(["run", _suite(tmp_path), "--out", str(tmp_path / out)]) == 2
    assert named in _one_error_line(capsys)
    assert not list(tmp_path.glob("*.partial.jsonl"))


# ---- one writer per file ------------------------------------------------------------------------
def test_a_second_writer_is_refused_with_the_holders_pid(tmp_path, capsys):
    out = tmp_path / "r.parquet"
    held = OutputLock(out)
    try:
        with pytest.raises(OutputBusy, match=f"pid {os.getpid()}"):
            OutputLock(out)
        assert main(["run", _suite(tmp_path), "--out", str(out), "--force"]) == 2
        assert f"pid {os.getpid()}" in _one_error_line(capsys)
    finally:
        held.release()
    OutputLock(out).release()                  # free again once released
    assert not list(tmp_path.glob(".*lock"))   # and no lock file left behind


def test_a_killed_holder_leaves_no_stale_lock(tmp_path):
    out = tmp_path / "r.parquet"
    code = ("import sys, time; from harness.locks import OutputLock; "
            f"OutputLock({str(out)!r}); print('held', flush=True); time.sleep(60)")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(TESTS.parent)})
    assert child.stdout.readline().strip() == "held"
    with pytest.raises(OutputBusy, match=f"pid {child.pid}"):
        OutputLock(out)
    child.kill()
    child.wait(10)
    OutputLock(out).release()


@pytest.mark.slow
def test_concurrent_runs_keep_every_row(tmp_path):
    """Two default runs at once get files of their own; two runs into one --out: one refused."""
    suite = tmp_path / "slow.toml"
    suite.write_text(SUITE.replace("name = 'fake'\nalgorithms = ['exact']", "name = 'slow'")
                     .replace("name = 'tiny'", "name = 'slowtiny'"))
    first, second = (_convbench(["run", str(suite)], tmp_path) for _ in range(2))
    assert first.wait(60) == 0 and second.wait(60) == 0, second.stderr.read()
    files = list((tmp_path / "results").glob("slowtiny-*.parquet"))
    assert len(files) == 2 and all(len(store.load(f)) == POINTS for f in files)

    out, longer = tmp_path / "same.parquet", _slow_suite(tmp_path)
    first = _convbench(["run", str(longer), "--out", str(out)], tmp_path)
    deadline = time.time() + 30
    while not store.journal_path(out).exists() and time.time() < deadline:
        time.sleep(0.02)
    second = _convbench(["run", str(longer), "--out", str(out), "--append"], tmp_path)
    _, err = second.communicate(timeout=60)
    assert first.poll() is None, "the first run ended before the second tried: no contention"
    assert second.returncode == 2 and f"pid {first.pid}" in err, err
    assert first.wait(60) == 0
    assert len(store.load(out)) == 30


def _slow_suite(tmp_path: Path) -> Path:
    """30 points of about 30 ms each: long enough to collide with or to kill."""
    layers = ", ".join(f"'mb2ic4ih{6 + i}oc4oh{6 + i}kh3ph1n\"l{i}\"'" for i in range(10))
    suite = tmp_path / "slow30.toml"
    suite.write_text(f"layers = [{layers}]\n[sweep]\ndirections = ['fwd', 'bwd_data', "
                     "'bwd_filter']\n[[sweep.backends]]\nname = 'slow'\n")
    return suite


# ---- a journal survives kills, torn lines and garbage -------------------------------------------
def _journal_lines(tmp_path: Path) -> list[str]:
    out = tmp_path / "whole.parquet"
    assert main(["run", _suite(tmp_path), "--out", str(out)]) == 0
    return [store.json.dumps(r, default=str) for r in store.load(out).to_dict("records")]


def test_a_torn_last_line_is_skipped_and_resume_keeps_everything(tmp_path, capsys):
    lines = _journal_lines(tmp_path)
    out = tmp_path / "r.parquet"
    store.journal_path(out).write_text(lines[0] + "\n" + lines[1] + "\n" + lines[2][:40])
    capsys.readouterr()
    assert main(["run", _suite(tmp_path), "--out", str(out), "--resume"]) == 0
    captured = capsys.readouterr()
    assert "skipped 1 damaged line(s) (line 3)" in captured.err
    assert "2 already done" in captured.out and "wrote 2 rows" in captured.out
    df = store.load(out)
    assert len(df) == POINTS and df["point_id"].is_unique


def test_a_resumed_run_says_where_only_its_own_sitting_went(tmp_path, capsys):
    """The earlier sitting's rows keep the run's id, but not its wall time: counting their stage
    times read "prepare 94.4 s (121%)" of a 77.9 s resume (stop 62, an H200)."""
    rows = [store.json.loads(line) for line in _journal_lines(tmp_path)]
    for row in rows[:2]:
        row["stage_time_ms"] = 5e6          # 5,000 s: far beyond any sitting of this test
    out = tmp_path / "r.parquet"
    store.journal_path(out).write_text(
        "".join(store.json.dumps(r, default=str) + "\n" for r in rows[:2]))
    capsys.readouterr()
    assert main(["run", _suite(tmp_path), "--out", str(out), "--resume"]) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if " went (per row" in x]
    spent = float(line.split("time ")[1].split(" s")[0])
    assert spent < 100, line


def test_garbage_lines_are_skipped_and_the_rows_after_them_read(tmp_path):
    lines = _journal_lines(tmp_path)
    journal = tmp_path / "g.parquet.partial.jsonl"
    journal.write_bytes(lines[0].encode() + b"\n\xff\xfe garbage\n[1, 2]\n{\"a\": 1}\n"
                        + lines[1].encode() + b"\n" + lines[2][:10].encode())
    read = store.read_journal_lines(journal)
    assert len(read.rows) == 2 and read.damaged_lines == (2, 3, 4, 6)
    junk = tmp_path / "junk.parquet.partial.jsonl"
    junk.write_text("not json\n")
    with pytest.raises(store.ResultsError, match="no readable rows"):
        store.load(junk)


def test_resume_after_journals_cut_at_random_points_measures_each_point_once(tmp_path):
    """A kill can cut the journal at any byte: resume must end with every point exactly once."""
    lines = _journal_lines(tmp_path)
    whole = "".join(line + "\n" for line in lines).encode()
    rng = random.Random(12)
    for trial in range(24):
        out = tmp_path / f"cut{trial}.parquet"
        store.journal_path(out).write_bytes(whole[:rng.randrange(1, len(whole))])
        assert main(["run", _suite(tmp_path), "--out", str(out), "--resume"]) == 0
        df = store.load(out)
        assert len(df) == POINTS and df["point_id"].is_unique, trial


@pytest.mark.slow
def test_killed_at_twenty_random_moments_then_resumed(tmp_path):
    """kill -9 a real sweep 20 times at random moments, resuming each time: in the end every
    point is there once, and the journal never made a resume fail."""
    suite = _slow_suite(tmp_path)
    out, rng, kills = tmp_path / "k.parquet", random.Random(3), 0
    while kills < 20:
        args = ["run", str(suite), "--out", str(out)] + (["--resume"] if kills else [])
        child = _convbench(args, tmp_path)
        time.sleep(rng.uniform(0.3, 1.2))
        if child.poll() is not None:
            assert child.returncode == 0, child.stderr.read()
            break
        child.send_signal(signal.SIGKILL)
        child.wait(10)
        kills += 1
    finished = _convbench(["run", str(suite), "--out", str(out), "--resume"], tmp_path)
    assert finished.wait(120) == 0, finished.stderr.read()
    df = store.load(out)
    assert len(df) == 30 and df["point_id"].is_unique, kills


def test_resume_without_out_finds_the_latest_unfinished_run_whatever_its_date(
        tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    suite = _suite(tmp_path)
    lines = _journal_lines(tmp_path)
    env = {"gpu_name": None}
    monkeypatch.setattr("harness.env.fingerprint", lambda include_gpu=True: dict(env))
    old = runs.new_run_path("tiny", env, "20240101T000000Z-abcdef")
    old.parent.mkdir()
    store.journal_path(old).write_text(lines[0] + "\n")
    assert main(["run", suite, "--resume"]) == 0
    assert "1 already done" in capsys.readouterr().out
    assert len(store.load(old)) == POINTS
    assert main(["run", suite, "--resume"]) == 2
    assert "no unfinished run" in _one_error_line(capsys)


# ---- readers find runs by name, folder and glob -------------------------------------------------
def test_a_suite_name_means_its_latest_run_on_this_machine(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    suite = _suite(tmp_path)
    assert main(["run", suite]) == 0
    assert main(["run", suite, "--direction", "fwd"]) == 0
    capsys.readouterr()
    latest = max((tmp_path / "results").glob("tiny-*.parquet"), key=lambda p: p.stat().st_mtime)
    assert [p.resolve() for p in runs.resolve("tiny", lambda: {})] == [latest]
    assert main(["table", "tiny"]) == 0
    assert main(["table", "results/tiny-*.parquet"]) == 0
    assert main(["compare", "results", "tiny"]) in (0, 1)
    assert main(["report", "tiny", "--jobs", "1"]) == 0
    assert (tmp_path / "reports" / latest.name.split(".")[0] / "index.html").exists()
    assert main(["table", "nosuchsuite"]) == 2
    assert "nosuchsuite" in _one_error_line(capsys)


# ---- files that are not what they claim ----------------------------------------------------------
def _written(tmp_path: Path) -> Path:
    out = tmp_path / "r.parquet"
    assert main(["run", _suite(tmp_path), "--out", str(out)]) == 0
    return out


def test_random_corruption_is_refused_never_misread(tmp_path):
    path = _written(tmp_path)
    good, data = store.load(path), path.read_bytes()
    rng, refused, misread = random.Random(5), 0, []
    for trial in range(60):
        damaged = bytearray(data)
        at = rng.randrange(0, len(data) - 64)
        damaged[at:at + 64] = rng.randbytes(64)
        bad = tmp_path / f"bad{trial}.parquet"
        bad.write_bytes(bytes(damaged))
        try:
            got = store.load(bad)
        except store.ResultsError:
            refused += 1
            continue
        if not got.astype(str).equals(good.astype(str)):
            misread.append(at)
    assert not misread, f"corruptions at {misread} loaded changed data"
    assert refused >= 30


@pytest.mark.parametrize("drop", ["median_ms", "layer"])
def test_a_file_missing_core_columns_is_refused(tmp_path, capsys, drop):
    path = _written(tmp_path)
    store.load(path).drop(columns=[drop]).to_parquet(path)
    capsys.readouterr()
    assert main(["table", str(path)]) == 2
    assert drop in _one_error_line(capsys)


def test_a_file_from_a_newer_schema_is_refused(tmp_path, capsys):
    path = _written(tmp_path)
    df = store.load(path)
    df["schema_version"] = store.SCHEMA_VERSION + 1
    df.to_parquet(path)
    capsys.readouterr()
    assert main(["table", str(path)]) == 2
    assert "upgrade convbench" in _one_error_line(capsys)


# ---- the exit-code contract ---------------------------------------------------------------------
def test_an_internal_error_is_exit_3_with_one_line_and_the_traceback_on_disk(
        tmp_path, monkeypatch, capsys):
    def broken(*args, **kwargs):
        raise RuntimeError("planted harness bug")

    monkeypatch.setattr("harness.runner.run_points", broken)
    assert main(["run", _suite(tmp_path), "--out", str(tmp_path / "r.parquet")]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "planted harness bug" in err[0] and "internal error" in err[0]
    where = Path(err[0].split("full traceback is in ")[1].rstrip(")"))
    assert "Traceback" in where.read_text()
    where.unlink()
    assert not (tmp_path / "r.parquet").exists()
    assert not list(tmp_path.glob(".*lock"))            # the lock went with the failed run


def test_a_closed_pipe_is_no_traceback():
    big = TESTS / "golden" / "resnet50-cudnn-nvidia-h100-2026-11-22.parquet"
    code = ("import sys; from harness.cli import main; sys.exit(main(sys.argv[1:]))")
    # thousands of table lines: far more than a pipe buffer, so `head` closes it mid-write
    shell = f"{sys.executable} -c {code!r} table {big} | head -n 2 >/dev/null"
    done = subprocess.run(["bash", "-o", "pipefail", "-c", shell], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(TESTS.parent)})
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
    assert done.returncode == 0



# ---- the user's path or disk is bad input, not a bug (issue 37) ---------------------------------
def _refuse_writes_in(monkeypatch, folder: Path, code: int) -> None:
    """Every os.open that would create or write a file in `folder` fails with errno `code`, as
    a read-only folder or file system answers (a chmod does not bite when the tests run as root;
    the lock file is the first thing a run creates there)."""
    real_open = os.open

    def refusing(path, flags, *args, **kwargs):
        writes = flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)
        if writes and Path(path).parent == folder:
            raise OSError(code, os.strerror(code), str(path))
        return real_open(path, flags, *args, **kwargs)
    monkeypatch.setattr(os, "open", refusing)


@pytest.mark.parametrize("code", [errno.EACCES, errno.EROFS])
def test_a_read_only_output_folder_exits_2_naming_it(tmp_path, monkeypatch, capsys, code):
    folder = tmp_path / "read-only"
    folder.mkdir()
    suite = _suite(tmp_path)
    _refuse_writes_in(monkeypatch, folder, code)
    assert main(["run", suite, "--out", str(folder / "r.parquet")]) == 2
    line = _one_error_line(capsys)
    assert f"cannot write {folder / 'r.parquet'}" in line, line
    assert ("read-only" if code == errno.EROFS else "permission denied") in line, line
    assert list(folder.iterdir()) == []


def test_a_file_called_results_in_the_way_exits_2_naming_it(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "results").write_text("my notes")
    assert main(["run", _suite(tmp_path)]) == 2
    assert "results is a file, not a folder" in _one_error_line(capsys)
    assert (tmp_path / "results").read_text() == "my notes"


def _disk_full(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_full_disk_when_the_results_file_is_written_exits_2_and_resume_finishes(
        tmp_path, monkeypatch, capsys):
    out = tmp_path / "r.parquet"
    suite = _suite(tmp_path)
    with monkeypatch.context() as patched:
        patched.setattr(pd.DataFrame, "to_parquet", _disk_full)
        assert main(["run", suite, "--out", str(out)]) == 2
    line = _one_error_line(capsys)
    assert f"cannot write {out}" in line and "the disk is full" in line and "--resume" in line
    assert not out.exists() and len(store.load(out)) == POINTS     # read from the journal
    assert not list(tmp_path.glob(".*lock")) and not list(tmp_path.glob(".*.tmp"))
    assert main(["run", suite, "--out", str(out), "--resume"]) == 0
    assert len(store.load(out)) == POINTS


class _FillsUp:
    """A journal on a disk with room for `lines` more lines (a failed write leaves its line in
    the buffer, so the flush on close fails again, as on a real full disk)."""

    def __init__(self, handle, lines: int):
        self.handle, self.room, self.pending = handle, lines, False

    def write(self, text: str) -> int:
        if self.room == 0:
            self.pending = True
            _disk_full()
        self.room -= 1
        return self.handle.write(text)

    def flush(self) -> None:
        self.handle.flush()

    def close(self) -> None:
        self.handle.close()
        if self.pending:
            _disk_full()

    @property
    def closed(self) -> bool:
        return self.handle.closed


@pytest.mark.parametrize("room", [0, 1, 3, 4])
def test_a_full_disk_mid_run_exits_2_keeps_the_rows_and_releases_the_lock(
        tmp_path, monkeypatch, capsys, room):
    """The line the disk refuses: room 0, the writer's opening mark; 1, the first row; 3, a
    later row; 4, the mark after a group of rows."""
    out = tmp_path / "r.parquet"
    suite = _suite(tmp_path)
    real_open = store._open_for_append
    with monkeypatch.context() as patched:
        patched.setattr(store, "_open_for_append",
                        lambda journal, truncate: _FillsUp(real_open(journal, truncate), room))
        assert main(["run", suite, "--out", str(out)]) == 2
    line = _one_error_line(capsys)
    assert f"cannot write {out}" in line and "the disk is full" in line, line
    assert not list(tmp_path.glob(".*lock"))       # a --resume is not refused as "busy"
    if room:
        assert f"kept in {store.journal_path(out)}" in line and "--resume" in line, line
    if room > 1:
        assert 0 < len(store.load(out)) < POINTS
    assert main(["run", suite, "--out", str(out), "--resume"]) == 0
    assert len(store.load(out)) == POINTS


@pytest.mark.parametrize("where, code", [("pandas.DataFrame.to_parquet", errno.EBADF),
                                         ("harness.peaks.annotate_by_machine", errno.EACCES)])
def test_another_oserror_while_writing_stays_a_bug(tmp_path, monkeypatch, capsys, where, code):
    """A write convbench botched (EBADF), or a file that is not the output (a cache read while
    the results are written), is no bad input: exit 3 with the traceback."""
    def refused(*args, **kwargs):
        raise OSError(code, os.strerror(code), None if code == errno.EBADF else "/elsewhere/x")

    monkeypatch.setattr(where, refused)
    assert main(["run", _suite(tmp_path), "--out", str(tmp_path / "r.parquet")]) == 3
    line = capsys.readouterr().err.strip()
    assert "internal error" in line and os.strerror(code) in line, line
    Path(line.split("full traceback is in ")[1].rstrip(")")).unlink()


def test_an_out_that_is_a_link_writes_through_to_its_target(tmp_path, capsys):
    suite, target, link = _suite(tmp_path), tmp_path / "kept.parquet", tmp_path / "link.parquet"
    assert main(["run", suite, "--out", str(target)]) == 0
    link.symlink_to(target)
    assert main(["run", suite, "--out", str(link), "--append"]) == 0
    assert link.is_symlink() and link.resolve() == target
    assert store.load(target)["run_id"].nunique() == 2
    assert main(["run", suite, "--out", str(link), "--force"]) == 0
    assert link.is_symlink() and len(store.load(target)) == POINTS
    assert not list(tmp_path.glob("*.partial.jsonl"))
    lock = OutputLock(target)           # the link and the target are one file: one writer
    try:
        capsys.readouterr()
        assert main(["run", suite, "--out", str(link), "--append"]) == 2
        assert "being written by another convbench run" in _one_error_line(capsys)
    finally:
        lock.release()
