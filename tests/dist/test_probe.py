"""`zerotune probe` for real: 2 gloo ranks on this CPU host, and ranks that die or hang."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, pid_alive
from zerotune.catalog.hardware import load_profile
from zerotune.errors import RunFailed
from zerotune.probe.metrics import SWEPT
from zerotune.probe.runner import ProbeOptions, run_probe

pytestmark = pytest.mark.slow


# `zerotune probe` as a user runs it, with runner.merge_compute spied on so that the ranks' own compute
# results (which the profile only holds merged) are kept in ranks.json: one probe serves every check.
SPIED_PROBE = """
import json, sys
from zerotune.probe import runner
seen, real = [], runner.merge_compute
runner.merge_compute = lambda results: seen.append(results) or real(results)
from zerotune.cli.app import main
try:
    main(sys.argv[2:])
finally:
    open(sys.argv[1], "w").write(json.dumps(seen))
"""


@pytest.fixture(scope="module")
def probed(tmp_path_factory):
    """One real `zerotune probe --nproc 2 --quick --out p.yaml --json` run, shared by the checks."""
    folder = tmp_path_factory.mktemp("probe")
    env = {**os.environ, "ZEROTUNE_CACHE_DIR": str(folder / "cache"), "PYTHONPATH": str(REPO)}
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", SPIED_PROBE, str(folder / "ranks.json"), "probe", "--nproc", "2", "--quick",
         "--out", str(folder / "p.yaml"), "--json", "--timeout", "120"],
        capture_output=True, text=True, env=env, timeout=180,
    )  # fmt: skip
    return done, folder, time.monotonic() - start


def test_exit_zero_and_only_json_on_stdout(probed) -> None:
    done, _, elapsed = probed
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads(done.stdout)
    assert data["schema_version"] == 1
    assert elapsed < 120


def test_profile_file_is_what_recommend_needs(probed) -> None:
    done, folder, _ = probed
    profile = load_profile(str(folder / "p.yaml"))
    assert profile.origin == "probe" and profile.gpus_per_node == 0 and profile.gpu is None
    link = profile.intra_node
    assert link is not None and link.backend == "gloo" and link.ranks == 2
    assert set(link.collectives) == set(SWEPT)
    assert profile.compute.achieved_flops["fp32"] > 1e8  # any CPU does > 0.1 GFLOP/s fp32
    assert profile.compute.overlap_slowdown is not None and profile.compute.overlap_slowdown >= 1
    assert profile.host.cpu_adam_params_per_s > 0
    assert "measured by zerotune probe" in profile.compute.source
    # a CPU host: every rank computed at once, so the numbers are what one of 2 ranks gets
    assert "2 ranks computing concurrently" in profile.compute.measured_shape
    assert "2 ranks computing concurrently" in profile.compute.source
    # a --quick probe does not replace the cached profile other commands use, and says so
    assert not (folder / "cache" / "last-probe.yaml").exists()
    assert "not cached (a --quick probe)" in " ".join(done.stderr.split())


def test_sweep_sanity(probed) -> None:
    """Correct results everywhere, bandwidth growing with size, a physical fit."""
    done, folder, _ = probed
    sweep = json.loads(done.stdout)["sweeps"]["intra_node"]
    assert sweep["ranks"] == 2 and sweep["wrong"] == 0
    for op in SWEPT:
        rows = sweep["rows"][op]
        assert [r["size_bytes"] for r in rows] == sorted(r["size_bytes"] for r in rows)
        assert all(r["wrong"] == 0 for r in rows)
        small = sum(r["busbw_GBps"] for r in rows[:3]) / 3
        large = sum(r["busbw_GBps"] for r in rows[-3:]) / 3
        assert large > 2 * small, f"{op}: busbw does not grow with size ({small:.4f} -> {large:.4f} GB/s)"
    profile = load_profile(str(folder / "p.yaml"))
    for perf in profile.intra_node.collectives.values():
        assert perf.alpha_s >= 0 and perf.busbw_Bps > 0 and len(perf.curve) == len(rows)


def test_cpu_ranks_all_run_the_compute_benchmarks(probed) -> None:
    """On gloo every rank times the block and CPU Adam (with its share of the cores, all at once);
    the profile holds the median over the ranks."""
    done, folder, _ = probed
    assert done.returncode == 0, done.stderr[-2000:]
    profile = load_profile(str(folder / "p.yaml"))
    if profile.gpu is not None:
        pytest.skip("this host has an NVIDIA GPU: rank 0 computes alone there")
    (results,) = json.loads((folder / "ranks.json").read_text())
    computes = [r["compute"] for r in results]
    assert [c["concurrent_ranks"] for c in computes] == [2, 2]
    flops = [c["block"]["flops"] for c in computes]
    adam = [c["adam"]["params_per_s"] for c in computes]
    assert all(f > 1e8 for f in flops) and all(a > 0 for a in adam)
    assert profile.compute.achieved_flops["fp32"] == pytest.approx(sum(flops) / 2)
    # the node's CPU-Adam rate: the median rank's (the mean of two) times the 2 ranks sharing the host
    assert profile.host.cpu_adam_params_per_s == pytest.approx(sum(adam))


def test_no_gpu_notice_on_stderr(probed) -> None:
    done, _, _ = probed
    if "no NVIDIA GPU" not in done.stderr:
        pytest.skip("this host has an NVIDIA GPU")
    assert "NVML" in done.stderr


def _children() -> list[int]:
    """Our live (non-zombie) child processes, from /proc."""
    me, pids = os.getpid(), []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me and fields[0] != "Z":
            pids.append(int(entry.name))
    return pids


@pytest.mark.parametrize("kind", ["exit", "hang"])
def test_failed_rank_is_named_and_nothing_survives(kind, tmp_path) -> None:
    timeout = 15.0
    fault = {"rank": 1, "at": "all_gather", "kind": kind, "pid_dir": str(tmp_path)}
    start = time.monotonic()
    with pytest.raises(RunFailed) as caught:
        run_probe(ProbeOptions(nproc=2, quick=True, timeout_s=timeout, fault=fault))
    elapsed = time.monotonic() - start
    message = caught.value.message
    assert elapsed < timeout + 5
    if kind == "exit":
        assert "rank 1" in message and "all_gather" in message and "injected fault" in message, message
    else:
        assert "timed out" in message and "rank 1" in message, message
        if "rank 0 at 'all_gather" not in message:  # a host too loaded to reach the fault in time
            pytest.skip(f"ranks did not reach the injected hang within {timeout:g} s: {message}")
        # the hung rank stopped before the first size; its peer waits inside the first call
        assert "rank 1 at 'all_gather'" in message and "rank 0 at 'all_gather 4096 B'" in message, message
    pids = [int(p.read_text()) for p in tmp_path.glob("rank*.pid")]
    assert len(pids) == 2
    assert not [pid for pid in pids if pid_alive(pid)]
    assert _children() == []


@pytest.mark.skipif(
    not os.environ.get("ZEROTUNE_TORCHRUN_TESTS"),
    reason="4 torchrun ranks take ~20 s (over a minute on a loaded 2-core host); set ZEROTUNE_TORCHRUN_TESTS=1",
)
def test_distributed_two_nodes_of_two(tmp_path) -> None:
    """`probe --distributed` under two torchrun agents on loopback (2 "nodes" x 2 ranks): intra-node
    and inter-node groups measured separately, one report from global rank 0."""
    from zerotune.launch import free_port

    port = str(free_port())
    env = {**os.environ, "ZEROTUNE_CACHE_DIR": str(tmp_path), "PYTHONPATH": str(REPO)}
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "2",
                "--master-addr", "127.0.0.1", "--master-port", port]  # fmt: skip
    probe = ["-m", "zerotune", "probe", "--distributed", "--quick", "--json", "--timeout", "150"]
    other = subprocess.Popen([*torchrun, "--node-rank", "1", *probe], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        done = subprocess.run([*torchrun, "--node-rank", "0", *probe], env=env, capture_output=True,
                              text=True, timeout=180)  # fmt: skip
        other_out, _ = other.communicate(timeout=30)
    finally:
        other.kill()
    assert done.returncode == 0 and other.returncode == 0, done.stderr[-2000:]
    assert other_out == b""  # only global rank 0 reports
    data = json.loads(done.stdout)
    profile = data["profile"]
    assert profile["nodes"] == 2 and profile["gpus_per_node"] == 0
    assert profile["intra_node"]["ranks"] == 2 and profile["inter_node"]["ranks"] == 2
    assert profile["inter_node"]["kind"] == "tcp-gloo" and profile["intra_node"]["kind"] == "loopback-gloo"
    for where in ("intra_node", "inter_node"):
        assert data["sweeps"][where]["wrong"] == 0
        assert set(data["sweeps"][where]["rows"]) == set(SWEPT)
