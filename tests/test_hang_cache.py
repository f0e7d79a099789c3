"""Engines that hung, remembered across runs (harness/hang_cache.py): the next run on the same
GPU and libraries gives their plans the short cap from the start; another scope, a corrupt file
or --no-cache never lets the cache change a run's rows beyond that."""
from __future__ import annotations

import json

import pytest

from harness import backends, hang_cache, store, worker
from harness.cli import main

ENV = {"gpu_name": "NVIDIA H100 80GB HBM3", "gpu_driver": "580.159.04", "cuda_runtime": 13000,
       "cudnn": 91900, "cudnn_frontend": "1.16.0", "numpy": "2.3"}
KEY = ("cudnn_graph", "bwd_data", "fp16", "auto", "eng4")


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("CONVBENCH_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_what_is_saved_is_loaded_for_the_same_gpu_and_libraries_only():
    assert hang_cache.load(ENV) == (set(), None)
    where = hang_cache.save(ENV, {KEY})
    assert where.parent.name == "cache" and hang_cache.load(ENV) == ({KEY}, None)
    assert hang_cache.load({**ENV, "numpy": "2.4"}) == ({KEY}, None)     # not in the scope
    for field, other in (("cudnn", 92000), ("gpu_name", "NVIDIA H200"), ("gpu_driver", "590")):
        assert hang_cache.load({**ENV, field: other}) == (set(), None)   # another file
    assert hang_cache.save(ENV, set()) is None


@pytest.mark.parametrize("text, why", [
    ("{not json", "Expecting property name"),
    ('{"format": 0, "scope": {}, "hung_engines": []}', "format 0, not 1"),
    ("[1, 2]", "has no attribute"),
    ('{"format": 1, "scope": null, "hung_engines": []}', "another GPU, driver or library"),
])
def test_an_unusable_file_is_a_note_and_no_engine(text, why):
    where = hang_cache.path(ENV)
    where.parent.mkdir(parents=True)
    where.write_text(text)
    keys, note = hang_cache.load(ENV)
    assert keys == set() and str(where) in note and why in note and "ignored" in note


def test_an_entry_that_is_not_a_key_makes_the_file_unusable():
    where = hang_cache.save(ENV, {KEY})
    body = json.loads(where.read_text())
    body["hung_engines"].append(["cudnn_graph", 4])
    where.write_text(json.dumps(body))
    assert hang_cache.load(ENV)[0] == set()


# ---- through `convbench run` ------------------------------------------------------------------
def _run(tmp_path, name: str, *flags: str) -> list[str]:
    assert main(["run", str(tmp_path / "hang.toml"), "--backend", "faulty_gpu", "--algorithm",
                 "hanging_engine", "--gpu-processes", "1", "--out",
                 str(tmp_path / f"{name}.parquet"), *flags]) == 0
    rows = store.load(tmp_path / f"{name}.parquet").set_index("algorithm")
    return [rows.at["eng2_k1=0", "status"], rows.at["eng2_k1=0", "reason"]]


@pytest.fixture
def hanging_suite(tmp_path, monkeypatch):
    monkeypatch.setattr(backends, "_REGISTRY", {**backends._REGISTRY,
                                                "faulty_gpu": "planted_backends:FaultyGpuBackend"})
    monkeypatch.setattr(worker, "UNIT_TIMEOUT_S", 60.0)
    monkeypatch.setattr(worker, "PLAN_TIMEOUT_S", 3.0)
    monkeypatch.setattr(worker, "HUNG_ENGINE_TIMEOUT_S", 1.0)
    (tmp_path / "hang.toml").write_text(
        "name = 'hang'\nlayers = ['mb1ic4ih6oc4oh6kh3ph1n\"w\"']\n[sweep]\n"
        "directions = ['fwd']\nprecisions = ['fp32']\n[[sweep.backends]]\nname = 'faulty_gpu'\n")


def test_a_later_run_gives_an_engine_that_hung_the_short_cap_from_the_start(
        tmp_path, hanging_suite, cache_dir, capsys):
    first = _run(tmp_path, "first")
    out = capsys.readouterr().out
    assert first == ["crashed", "eng2_k1=0: no result within 3 s (another plan of this point "
                                "returned): worker killed"]
    assert "remembered 1 engine(s) that hung" in out and len(list(cache_dir.iterdir())) == 1
    second = _run(tmp_path, "second")
    out = capsys.readouterr().out
    assert "1 engine(s) hung in earlier runs on this GPU and these libraries" in out
    assert second == ["crashed", "eng2_k1=0: no result within 1 s (engine eng2 hung before on "
                                 "this GPU): worker killed"]
    assert "remembered" not in out                     # nothing new to write
    forgotten = _run(tmp_path, "third", "--no-cache")
    assert "hung in earlier runs" not in capsys.readouterr().out
    assert "another plan of this point returned" in forgotten[1]


def test_a_corrupt_cache_is_named_ignored_and_written_afresh(tmp_path, hanging_suite,
                                                             cache_dir, capsys):
    cache_dir.mkdir()
    for name in ("a", "b"):    # a user's own files beside the cache: left alone
        (cache_dir / name).write_text("")
    _run(tmp_path, "probe", "--no-cache")
    capsys.readouterr()
    from harness import env as envmod
    where = hang_cache.path(envmod.fingerprint())
    where.write_text("{garbage")
    status, reason = _run(tmp_path, "after")
    captured = capsys.readouterr()
    assert f"note: hang cache {where}" in captured.err and "ignored" in captured.err
    assert "another plan of this point returned" in reason           # no engine taken from it
    assert hang_cache.load(envmod.fingerprint())[0] == {
        ("faulty_gpu", "fwd", "fp32", "auto", "eng2")}                 # written afresh
    assert sorted(p.name for p in cache_dir.iterdir()) == sorted(["a", "b", where.name])


def test_the_cache_folder_follows_the_environment(monkeypatch, tmp_path):
    from pathlib import Path

    from harness import cache_dir, peaks
    monkeypatch.setenv("CONVBENCH_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_dir.folder() == tmp_path / "mine"
    assert peaks.cache_path(ENV).parent == hang_cache.path(ENV).parent == tmp_path / "mine"
    monkeypatch.delenv("CONVBENCH_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir.folder() == tmp_path / "xdg" / "convbench"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_dir.folder() == Path.home() / ".cache" / "convbench"


def test_only_this_runs_hangs_are_remembered_not_an_appended_files_others(
        tmp_path, hanging_suite, cache_dir, capsys):
    # The file's earlier run (its engines hung on whatever machine made it) stays its own.
    _run(tmp_path, "shared", "--no-cache")
    assert main(["run", str(tmp_path / "hang.toml"), "--backend", "faulty_gpu", "--algorithm",
                 "quotes_a_fault", "--gpu-processes", "1", "--append", "--out",
                 str(tmp_path / "shared.parquet")]) == 0
    rows = store.load(tmp_path / "shared.parquet")
    assert rows["hung_engine"].notna().any() and rows["run_id"].nunique() == 2
    assert "remembered" not in capsys.readouterr().out and not cache_dir.exists()
