"""--cluster on Dask distributed, on the CPU: the same rows as a serial run, a Dask worker killed
mid-run changes nothing, a cluster run resumes without the cluster, and bad input is one line and
exit 2 with nothing written."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("distributed")

from harness import backends, cluster, store
from harness.cli import main

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("layers = ['mb2ic4ih8oc4oh8kh3ph1n\"a\"', 'mb2ic8ih10oc8kh3sh2n\"b\"']\n"
          "[sweep]\ndirections = ['fwd', 'bwd_data', 'bwd_filter']\n"
          "precisions = ['fp32', 'fp64']\n")
# every planted fault of the fake backend (wrong, crash, unsupported) and two workspace limits
FAKE_SUITE = LAYERS + "workspace_limits = [0, 'unlimited']\n[[sweep.backends]]\nname = 'fake'\n"
DIES_SUITE = LAYERS + "[[sweep.backends]]\nname = 'dies_once'\n"


def _suite(tmp_path: Path, text: str, name: str = "clustered") -> str:
    path = tmp_path / f"{name}.toml"
    path.write_text(f"name = '{name}'\n" + text)
    return str(path)


def _rows(path: Path) -> list[tuple[str, str]]:
    """(point id, status) of every row; a point written twice shows up twice."""
    df = store.load(path)
    return sorted(zip(df["point_id"], df["status"]))


def _wrote(said: str) -> list[int]:
    """The row counts a run says it wrote: more than the points means a row written twice
    (finish() folds duplicates away, so the file alone cannot tell)."""
    return [int(line.split()[1]) for line in said.splitlines() if line.startswith("wrote ")]


def _run(*args: str) -> int:
    return main(["run", *map(str, args)])


def test_the_cli_imports_no_dask_without_cluster():
    code = ("import sys, harness.cli; harness.cli.build_parser(); "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


@pytest.mark.parametrize("suite", ["quick", "fake"])
def test_a_local_cluster_gives_the_rows_of_a_serial_run(tmp_path, capsys, suite):
    # the quick suite's CPU points: on a GPU machine its optional cudnn points would need a GPU
    # a worker, and `--workers 2` two GPUs. One layer's six points are shards enough for two
    # workers; the whole suite, run twice, took 31-37 s of CI's time.
    name = (["quick", "--backend", "cpu", "--layer", "resnet_50:res3a_branch2c"]
            if suite == "quick" else [_suite(tmp_path, FAKE_SUITE)])
    serial, clustered = tmp_path / "serial.parquet", tmp_path / "cluster.parquet"
    assert _run(*name, "--out", serial) == 0
    assert _run(*name, "--out", clustered, "--cluster", "local", "--workers", "2") == 0
    assert _rows(clustered) == _rows(serial)
    said = capsys.readouterr().out
    assert "cluster local: 2 worker(s)" in said and "shards per worker" in said
    assert _wrote(said) == [len(_rows(serial))] * 2
    if suite == "fake":      # the planted crash is one failed row each, the rest as serial
        assert ("failed" in {s for _, s in _rows(clustered)}
                and {"ok", "wrong", "unsupported", "workspace_exceeded"}
                <= {s for _, s in _rows(clustered)})


def test_a_dask_worker_killed_mid_run_loses_and_repeats_no_row(tmp_path, monkeypatch, capsys):
    backends.register("dies_once", "planted_backends:DiesOnceBackend")
    suite = _suite(tmp_path, DIES_SUITE)
    serial, clustered = tmp_path / "serial.parquet", tmp_path / "cluster.parquet"
    assert _run(suite, "--out", serial) == 0          # no marker named: nothing dies here
    marker = tmp_path / "died"
    monkeypatch.setenv("CONVBENCH_TEST_DIE_MARKER", str(marker))
    assert _run(suite, "--out", clustered, "--cluster", "local", "--workers", "2") == 0
    assert marker.exists()                            # a worker really was killed
    assert _rows(clustered) == _rows(serial)
    assert _wrote(capsys.readouterr().out) == [len(_rows(serial))] * 2
    assert {s for _, s in _rows(clustered)} == {"ok"}


def test_a_stopped_cluster_run_is_finished_by_resume_without_the_cluster(
        tmp_path, monkeypatch, capsys):
    suite = _suite(tmp_path, FAKE_SUITE)
    serial, clustered = tmp_path / "serial.parquet", tmp_path / "cluster.parquet"
    assert _run(suite, "--out", serial) == 0
    append = store.ResultWriter.append

    def stop_half_way(writer, row):          # Ctrl-C after a third of the rows
        if writer.rows_written == len(_rows(serial)) // 3:
            raise KeyboardInterrupt
        append(writer, row)

    monkeypatch.setattr(store.ResultWriter, "append", stop_half_way)
    assert _run(suite, "--out", clustered, "--cluster", "local", "--workers", "2") == 130
    monkeypatch.setattr(store.ResultWriter, "append", append)
    assert 0 < len(_rows(clustered)) < len(_rows(serial))
    assert _run(suite, "--out", clustered, "--resume") == 0
    assert _rows(clustered) == _rows(serial)


@pytest.mark.parametrize("flags, says", [
    (["--cluster", "yarn"], "expected local, tcp://HOST:PORT or slurm"),
    (["--cluster", "tcp://127.0.0.1:9"], "no Dask scheduler answered within 1 s"),
    (["--workers", "2"], "--workers needs --cluster"),
    (["--cluster", "tcp://127.0.0.1:9", "--workers", "2"], "--workers is for --cluster local"),
    (["--cluster", "slurm", "--cluster-config", "missing.toml"], "missing.toml"),
    (["--cluster", "local", "--workers", "0"], "must be at least 1"),
    (["--cluster", "local", "--cluster-config", "examples/cluster-slurm.toml"],
     "--cluster-config is for --cluster slurm"),
], ids=["unknown_form", "unreachable", "workers_alone", "workers_remote", "config_missing",
        "zero_workers", "config_not_slurm"])
def test_bad_cluster_input_is_one_line_exit_2_and_nothing_written(
        tmp_path, monkeypatch, capsys, flags, says):
    monkeypatch.setattr(cluster, "CONNECT_TIMEOUT_S", 1)
    out = tmp_path / "r.parquet"
    assert _run(_suite(tmp_path, FAKE_SUITE), "--out", out, *flags) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1
    assert not out.exists() and not store.journal_path(out).exists()


@pytest.mark.parametrize("missing, says", [("distributed", "convbench[cluster]"),
                                           ("dask_jobqueue", "convbench[slurm]")])
def test_a_missing_extra_is_named_with_its_install_command(
        tmp_path, monkeypatch, capsys, missing, says):
    monkeypatch.setitem(sys.modules, missing, None)    # find_spec then says: not installed
    out = tmp_path / "r.parquet"
    assert _run(_suite(tmp_path, FAKE_SUITE), "--out", out, "--cluster", "slurm") == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_the_slurm_example_config_is_read_and_bad_keys_are_named(tmp_path):
    options = cluster._slurm_options(str(ROOT / "examples" / "cluster-slurm.toml"))
    assert set(options) == set(cluster.SLURM_KEYS)
    assert options["gpus_per_job"] * options["jobs"] == 8
    bad = tmp_path / "bad.toml"
    bad.write_text("[cluster]\nqueue = 'gpu'\ngpus = 4\n")
    with pytest.raises(cluster.ClusterError, match="unknown key 'gpus'"):
        cluster._slurm_options(str(bad))
    bad.write_text("[cluster]\njobs = 0\n")
    with pytest.raises(cluster.ClusterError, match="jobs = 0 must be a positive integer"):
        cluster._slurm_options(str(bad))


def test_shards_share_test_data_and_come_largest_first():
    from harness import runner, suite
    points = runner.plan(suite.load_suite("quick")).points
    shards = runner.shards(points)
    assert sorted(p.point_id for s in shards for p in s) == sorted(p.point_id for p in points)
    assert all(len({(p.problem, p.precision) for p in s}) == 1 for s in shards)
    work = [len(s) * s[0].problem.flops for s in shards]
    assert work == sorted(work, reverse=True)
    # a shard is a whole run of plan order: 3 on a machine without a GPU; with one, the GPU
    # backends' phase repeats the problems (6 shards for 3 problems on an H200 pair)
    keys = [(p.problem, p.precision) for p in points]
    assert len(shards) == 1 + sum(a != b for a, b in zip(keys, keys[1:]))
    if all(p.backend in ("cpu", "torch_cpu") for p in points):
        assert len(shards) == 3


def test_workers_that_differ_in_gpu_are_refused_unless_allowed():
    from harness.cli import UserError
    from harness.cli.running import _refuse_mixed
    environments = {"a": {"gpu_name": "H100", "cpu_model": "x"},
                    "b": {"gpu_name": "H200", "cpu_model": "y"}}
    with pytest.raises(UserError, match="workers differ in gpu_name .*--allow-mixed"):
        _refuse_mixed(environments, cpu=False, allowed=False)
    _refuse_mixed(environments, cpu=False, allowed=True)
    cpus = {"a": {"cpu_model": "x"}, "b": {"cpu_model": "y"}}
    _refuse_mixed(cpus, cpu=False, allowed=False)     # GPU points only: the host CPU is moot
    with pytest.raises(UserError, match="workers differ in cpu_model"):
        _refuse_mixed(cpus, cpu=True, allowed=False)  # CPU points too: it is not


def test_a_worker_that_joins_later_on_another_gpu_is_refused_before_its_rows_are_written():
    joined = cluster.Cluster(None, None, None)
    joined.comparable = cluster.comparability_fields(cpu=False)
    joined.reference_env = {"gpu_name": "H100", "cudnn": "9.19"}
    same = cluster.ShardResult("gpu0", {"gpu_name": "H100", "cudnn": "9.19"}, (), ())
    other = cluster.ShardResult("late", {"gpu_name": "H200", "cudnn": "9.19"}, (), ())
    assert joined.foreign_worker(same) is None
    assert "worker late differs in gpu_name (H100, H200)" in joined.foreign_worker(other)
    joined.comparable = None                                   # --allow-mixed
    assert joined.foreign_worker(other) is None


GPU_SUITE = (LAYERS.replace("['fp32', 'fp64']", "['fp64']")
             + "[[sweep.backends]]\nname = 'fake_gpu'\n")


def test_gpu_shards_run_pinned_one_gpu_a_worker_and_a_crash_is_one_crashed_row(
        tmp_path, monkeypatch, capsys):
    """The GPU path without a GPU: a backend that says it is `cuda` runs each point in the
    crash-isolated child of a (non-daemonic) Dask worker, one worker per visible GPU."""
    backends.register("fake_gpu", "planted_backends:FakeGpuBackend")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")      # nothing here starts CUDA
    out = tmp_path / "gpu.parquet"
    assert _run(_suite(tmp_path, GPU_SUITE), "--out", out, "--cluster", "local") == 0
    assert "cluster local: 2 worker(s): gpu3, gpu5" in capsys.readouterr().out
    rows = store.load(out)
    dies = rows[rows["algorithm"] == "dies"]
    assert set(dies["status"]) == {"crashed"} and len(dies) == 6
    assert "worker process died" in dies["reason"].iloc[0]
    assert set(rows[rows["algorithm"] == "exact"]["status"]) == {"ok"}


def test_local_gpu_workers_each_see_only_their_gpu(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    with cluster.connect("local", None, None, gpu=True) as dask:
        seen = dask.client.run(lambda: __import__("os").environ["CUDA_VISIBLE_DEVICES"])
        resources = [w["resources"] for w in dask.client.scheduler_info()["workers"].values()]
    assert sorted(seen.values()) == ["3", "5"]
    assert resources == [{"GPU": 1}, {"GPU": 1}]


def test_daemonic_gpu_workers_are_refused_at_connect_with_the_setting_that_fixes_them(
        monkeypatch):
    """What `dask worker` does unless told otherwise: its worker could not start the process
    that times GPU points, and every shard would fail as an internal error."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    monkeypatch.setattr(cluster, "_CLUSTER_CONFIG",
                        {**cluster._CLUSTER_CONFIG, "distributed.worker.daemon": True})
    with pytest.raises(cluster.ClusterError, match="DASK_DISTRIBUTED__WORKER__DAEMON=False"):
        cluster.connect("local", None, None, gpu=True)


def test_closing_the_run_stops_the_gpu_children_of_a_users_workers():
    """A user's long-lived worker (`--cluster tcp://`) keeps no Measurer, so no GPU child
    holding a CUDA context, once the run that used it is over."""
    from distributed import Client, LocalCluster
    with LocalCluster(n_workers=1, processes=True, dashboard_address=":0") as theirs:
        run = cluster.connect(theirs.scheduler_address, None, None, gpu=False)
        run.client.run(lambda: cluster._measurers.setdefault(7, (_Closable(), {})))
        run.close()
        with Client(theirs.scheduler_address) as look:
            left = look.run(lambda: len(cluster._measurers))
    assert list(left.values()) == [0]


class _Closable:
    def close(self) -> None:
        pass


# ---- a mixed run is read per GPU ----------------------------------------------------------------
ROOT = Path(__file__).resolve().parent.parent
H200_RUN = ROOT / "tests" / "golden" / "scaleout-cudnn-1gpu-nvidia-h200-2026-11-23.parquet"
CPU_RUN = ROOT / "tests" / "golden" / "quick-cpu-2026-11-22.parquet"


def test_table_of_rows_from_two_machines_is_one_table_per_gpu(capsys):
    assert main(["table", str(H200_RUN), str(CPU_RUN)]) == 0
    out = capsys.readouterr().out
    h200, no_gpu = out.index("== NVIDIA H200: 840 rows =="), out.index("== no GPU: 18 rows ==")
    gpu_block = out[h200:no_gpu] if h200 < no_gpu else out[h200:]
    cpu_block = out[no_gpu:h200] if no_gpu < h200 else out[no_gpu:]
    assert "cudnn:" in gpu_block and "cpu:" not in gpu_block
    assert "cpu:" in cpu_block and "cudnn:" not in cpu_block


def test_one_machine_is_not_split(capsys):
    assert main(["table", str(H200_RUN)]) == 0
    assert "==" not in capsys.readouterr().out


def test_report_of_rows_from_two_machines_is_one_report_per_gpu(tmp_path, capsys):
    out = tmp_path / "mixed"
    assert main(["report", str(H200_RUN), str(CPU_RUN), "--out", str(out), "--jobs", "1"]) == 0
    h200 = (out / "nvidia-h200" / "index.md").read_text()
    cpu = (out / "no-gpu" / "index.md").read_text()
    assert "cudnn" in h200 and "cudnn" not in cpu


def test_one_peaks_file_is_refused_for_rows_from_several_machines(tmp_path, capsys):
    peaks = tmp_path / "peaks.json"
    peaks.write_text('{"fp16": 700.0, "bandwidth_gbps": 3000.0}')
    assert main(["report", str(H200_RUN), str(CPU_RUN), "--out", str(tmp_path / "r"),
                 "--peaks", str(peaks)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "come from 2 machines" in err[0]


def test_each_gpus_rows_take_the_roofline_of_their_own_gpu(monkeypatch):
    """A cluster run's rows from an H200 must not be placed under the client's H100 ceilings."""
    from harness import peaks
    rows = store.load(H200_RUN).head(40).copy()
    rows.loc[rows.index[:20], "env_gpu_name"] = "NVIDIA H100 80GB HBM3"
    rows[["achieved_tflops", "roofline_pct"]] = float("nan")
    cached = {"NVIDIA H100 80GB HBM3": {p: 500.0 for p in ("fp32", "tf32", "fp16", "bf16",
                                                             "fp64")} | {"bandwidth_gbps": 3e3}}
    monkeypatch.setattr(peaks, "load_cached", lambda env: cached.get(env.get("gpu_name")))
    annotated, missing = peaks.annotate_by_machine(rows)
    h100 = annotated["env_gpu_name"] == "NVIDIA H100 80GB HBM3"
    timed = annotated["median_ms"].notna()
    assert annotated.loc[h100 & timed, "roofline_pct"].notna().all()
    assert annotated.loc[~h100, "roofline_pct"].isna().all()
    assert missing == ["NVIDIA H200"] and list(annotated.index) == list(rows.index)
