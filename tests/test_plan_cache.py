"""The graph API's plan labels, remembered across runs (harness/plan_cache.py): a later process
gets a plan set's notes and ranks back only for exactly the plans the heuristics offer it, only
for the same GPU and libraries, never from a corrupt or foreign file, and not at all with
--no-cache."""
from __future__ import annotations

import json

import pytest

from harness import plan_cache
from harness.plan_cache import PlanCache

ENV = {"gpu_name": "NVIDIA H100 80GB HBM3", "gpu_driver": "580.159.04", "cuda_runtime": 13000,
       "cudnn": 91900, "cudnn_frontend": "1.16.0", "numpy": "2.3"}
KEY = "n32c64h56w56k64r3s3u1v1p1.1.1.1d1.1g1|fwd|conv|HALF/FLOAT|fp16|NHWC"
LABELS = {"eng0": (("tensor_core",), (), 2), "eng28_k2=1": ((), ("runtime_compilation",), 0),
          "eng4": (("fft", "nondeterministic"), (), None)}


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("CONVBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(plan_cache, "_here", None)
    return tmp_path / "cache"


def _worker_cache() -> PlanCache:
    """What a worker process handed the run's file sees."""
    plan_cache.open_here(plan_cache.for_run(ENV))
    return PlanCache()


def test_a_later_process_gets_the_labels_back_for_exactly_the_same_plans():
    _worker_cache().store(KEY, LABELS)
    later = _worker_cache()
    assert later.lookup(KEY, ["eng4", "eng0", "eng28_k2=1"]) == LABELS      # any order
    assert later.lookup(KEY, ["eng0", "eng28_k2=1"]) is None       # the heuristics offer fewer
    assert later.lookup(KEY, [*LABELS, "eng9"]) is None             # or more: asked afresh
    assert later.lookup(KEY.replace("NHWC", "NCHW"), list(LABELS)) is None
    assert plan_cache.check(ENV) == (1, None)


def test_what_another_process_appends_is_read_when_this_one_misses():
    first, second = _worker_cache(), _worker_cache()
    assert second.lookup(KEY, list(LABELS)) is None
    first.store(KEY, LABELS)
    assert second.lookup(KEY, list(LABELS)) == LABELS


def test_a_line_still_being_written_is_read_once_it_is_whole():
    _worker_cache().store("other", {"eng1": ((), (), 0)})
    where = plan_cache.path(ENV)
    line = json.dumps({"key": KEY, "plans": {"eng0": [["tensor_core"], [], 2]}})
    with open(where, "a") as out:
        out.write(line[:20])
    reader = PlanCache(where)
    assert reader.lookup(KEY, ["eng0"]) is None
    with open(where, "a") as out:
        out.write(line[20:] + "\n")
    assert reader.lookup(KEY, ["eng0"]) == {"eng0": (("tensor_core",), (), 2)}


def test_a_check_leaves_a_line_another_run_is_writing_alone():
    _worker_cache().store(KEY, LABELS)
    where = plan_cache.path(ENV)
    with open(where, "a") as out:
        out.write('{"key": "half')
    assert plan_cache.check(ENV) == (1, None) and where.exists()


def test_another_gpu_or_library_version_reads_another_file():
    _worker_cache().store(KEY, LABELS)
    for field, other in (("cudnn", 92000), ("gpu_name", "NVIDIA H200"),
                         ("cudnn_frontend", "1.17.0")):
        assert plan_cache.path({**ENV, field: other}) != plan_cache.path(ENV)
        assert plan_cache.check({**ENV, field: other}) == (0, None)


@pytest.mark.parametrize("text, why", [
    ("{not json\n", "Expecting property name"),
    ('{"format": 0, "scope": {}}\n', "format 0, not 1"),
    ('{"format": 1, "scope": null}\n', "another GPU, driver or library"),
    (None, "is not labelled as a plan is"),
    ('["fft"], [], true', "is not labelled as a plan is"),   # a true rank, a string for notes
    ('"fft", [], 0', "is not labelled as a plan is"),
])
def test_an_unusable_file_is_a_note_and_is_written_afresh(text, why):
    _worker_cache().store(KEY, LABELS)
    where = plan_cache.path(ENV)
    if text is None or not text.startswith(("{", "(")):   # a good header, then a bad plan
        plan = '[], [], "first"' if text is None else text
        text = (where.read_text().splitlines()[0] + "\n"
                + f'{{"key": "{KEY}", "plans": {{"eng0": [{plan}]}}}}' + "\n")
    where.write_text(text)
    count, note = plan_cache.check(ENV)
    assert count == 0 and str(where) in note and why in note and "afresh" in note
    assert not where.exists()
    _worker_cache().store(KEY, LABELS)
    assert plan_cache.check(ENV) == (1, None)


def test_without_a_file_nothing_is_read_or_written(cache_dir):
    _worker_cache().store(KEY, LABELS)
    plan_cache.open_here(None)                 # --no-cache: the workers are handed none
    cache = PlanCache()
    assert cache.where is None and cache.lookup(KEY, list(LABELS)) is None
    cache.store("new", LABELS)
    assert plan_cache.check(ENV) == (1, None)  # only the first process's entry


def _probe(tmp_path, name: str, *flags: str) -> str:
    """What the worker process of `convbench run` was handed, as its row says."""
    from harness import backends, store
    from harness.cli import main
    backends.register("cache_probe_gpu", "planted_backends:PlanCacheProbeBackend")
    out = tmp_path / f"{name}.parquet"
    assert main(["run", "quick", "--layer", "res2a_branch2b", "--direction", "fwd",
                 "--precision", "fp32", "--layout", "NCHW", "--backend", "cache_probe_gpu",
                 "--gpu-processes", "1", "--out", str(out), *flags]) == 0
    return store.load(out)["reason"].iloc[0]


def test_the_run_hands_its_workers_the_file_and_no_cache_hands_none(tmp_path, cache_dir):
    from harness import env as envmod
    assert _probe(tmp_path, "cached") == f"plan cache: {plan_cache.path(envmod.fingerprint())}"
    assert _probe(tmp_path, "uncached", "--no-cache") == "plan cache: None"
    assert plan_cache._here is None                       # the main process keeps none itself
    assert not cache_dir.exists() or not list(cache_dir.glob("plan-sets-*"))  # nothing stored


def test_a_run_names_an_unusable_file_and_what_it_remembers(capsys):
    """What `convbench run` says (harness/cli/caches.py): a corrupt file in a note, then gone;
    a good one by how many plan sets it holds."""
    from harness.cli import caches
    where = plan_cache.path(ENV)
    where.parent.mkdir(parents=True)
    where.write_text("{garbage\n")
    assert caches.plan_cache_for(ENV) == plan_cache.for_run(ENV)
    err = capsys.readouterr().err
    assert f"note: plan cache {where}" in err and "afresh" in err and not where.exists()
    _worker_cache().store(KEY, LABELS)
    caches.plan_cache_for(ENV)
    assert "1 graph-API plan set(s) labelled in earlier runs" in capsys.readouterr().out
