"""scripts/gpu_acceptance.py without a GPU or DeepSpeed: its grid covers what issue 21 asks for,
a step that overruns is killed with its process group, finished steps are kept on a rerun, failed
ones retried, and --budget leaves steps for the next run. The whole dry run: tests/dist."""

from __future__ import annotations

import io
import os
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, pid_alive

SCRIPT = REPO / "scripts" / "gpu_acceptance.py"


@pytest.fixture(scope="module")
def acc():
    from scripts import gpu_acceptance

    return gpu_acceptance


def _run(acc, tmp_path: Path, **kw):
    return acc.Run(out=tmp_path, dry=True, force=kw.pop("force", False), budget_s=kw.pop("budget_s", None))


def test_gpu_grid_spans_stages_offloads_checkpointing_and_micro_batches(acc) -> None:
    grid = acc.GPU_GRID
    assert {p.stage for p in grid} == {0, 1, 2, 3}
    assert {p.micro_batch for p in grid} >= {1, 2, 4}
    assert {p.checkpointing for p in grid} == {True, False}
    assert any(p.offload_optimizer and not p.offload_param for p in grid)
    assert any(p.offload_param for p in grid)
    assert all(p.stage == 3 for p in grid if p.offload_param), "DeepSpeed offloads parameters only at stage 3"
    assert all(p.stage > 0 for p in grid if p.offload_optimizer)
    tiny = [p for p in grid if p.model == "tinyllama-1.1b"]
    assert tiny and all(p.layers == 22 for p in tiny), "the 1B-class model runs all 22 layers"
    assert any(p.model == "llama-7b" and p.layers < 32 for p in grid)
    assert len({p.id for p in grid}) == len(grid)


def test_plan_has_every_step_and_dry_mode_says_what_it_leaves_out(acc, tmp_path) -> None:
    steps = acc.plan(_run(acc, tmp_path))
    names = [s.name for s in steps]
    assert names[:4] == ["environment", "nvml", "probe", "cpu-adam"]
    assert names[-2:] == ["calibrate", "recommend"]
    assert [n for n in names if n.startswith("bench/")] == [f"bench/{p.id}" for p in acc.DRY_GRID]
    calibrate = steps[names.index("calibrate")]
    assert calibrate.skip_reason and "dry" in calibrate.skip_reason
    gpu = acc.plan(acc.Run(out=tmp_path, dry=False, force=False, budget_s=None))
    recommend = gpu[-1].argv
    assert recommend[recommend.index("--measure") + 1] == "2"
    bench = next(s for s in gpu if s.name.startswith("bench/")).argv
    assert bench[bench.index("--device") + 1] == "cuda" and "--width-scale" not in bench


def test_a_step_past_its_limit_is_killed_with_its_children(acc, tmp_path) -> None:
    pid_file = tmp_path / "child.pid"
    code = (
        "import subprocess, sys, time;"
        f"c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']);"
        f"open({str(pid_file)!r}, 'w').write(str(c.pid)); time.sleep(120)"
    )
    step = acc.Step("hang", 2, [sys.executable, "-c", code])
    start = time.monotonic()
    record = acc.run_step(_run(acc, tmp_path), step, step.timeout_s)
    assert record["status"] == "timeout" and "killed" in record["reason"]
    assert time.monotonic() - start < 2 + acc.KILL_GRACE_S + 5
    deadline = time.monotonic() + 5
    while pid_alive(int(pid_file.read_text())) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not pid_alive(int(pid_file.read_text())), "the step's grandchild outlived its limit"


def test_a_rerun_keeps_finished_steps_and_retries_failed_ones(acc, tmp_path) -> None:
    marker = tmp_path / "ran"
    ok = acc.Step("ok", 30, [sys.executable, "-c", f"open({str(marker)!r}, 'a').write('x')"])
    bad = acc.Step("bad", 30, [sys.executable, "-c", "import sys; sys.exit('broken: on purpose')"])
    skipped = acc.Step("skip", 30, skip_reason="not here")
    first = acc.execute(_run(acc, tmp_path), [ok, bad, skipped], say=lambda m: None)
    assert [first[n]["status"] for n in ("ok", "bad", "skip")] == ["ok", "failed", "skipped"]
    assert "broken: on purpose" in first["bad"]["reason"]
    second = acc.execute(_run(acc, tmp_path), [ok, bad, skipped], say=lambda m: None)
    assert second["ok"].get("resumed") and second["skip"].get("resumed")
    assert not second["bad"].get("resumed"), "a failed step is retried"
    assert marker.read_text() == "x", "a finished step ran again"
    acc.execute(_run(acc, tmp_path, force=True), [ok], say=lambda m: None)
    assert marker.read_text() == "xx", "--force reruns finished steps"


def test_budget_leaves_the_steps_that_might_not_fit(acc, tmp_path) -> None:
    short = acc.Step("short", 5, [sys.executable, "-c", "pass"])
    long = acc.Step("long", 500, [sys.executable, "-c", "pass"])
    after = acc.Step("after", 5, [sys.executable, "-c", "pass"])
    records = acc.execute(_run(acc, tmp_path, budget_s=60), [short, long, after], say=lambda m: None)
    assert [records[n]["status"] for n in ("short", "long", "after")] == ["ok", "pending", "pending"]
    assert not acc.step_file(_run(acc, tmp_path), "long").exists()


def test_report_table_renders_measured_and_predicted(acc) -> None:
    evidence = {
        "steps": {"probe": {"status": "ok", "elapsed_s": 12.0}, "calibrate": {"status": "skipped", "reason": "dry"}},
        "configs": [
            {"id": "m-L1-z2-mb1", "status": "ok", "measured_step_time_s": 2.0, "predicted_step_time_s_probe": 2.5,
             "step_error_pct_probe": 25.0, "measured_peak_bytes": 3 * 1024**3, "measured_reserved_bytes": 4 * 1024**3,
             "predicted_peak_bytes": 3.3 * 1024**3, "memory_error_pct": 10.0},
            {"id": "m-L1-z3-mb1", "status": "timeout"},
        ],
        "errors": {"probe": acc.summary([25.0]), "calibrated": acc.summary([]), "memory": acc.summary([10.0])},
        "cpu_adam": {"torch": {"params_per_s": 3e8}, "deepspeed": {"status": "ok", "params_per_s": 1.2e9}},
    }  # fmt: skip
    text = io.StringIO()
    acc.render(evidence, file=text)
    out = text.getvalue()
    assert "m-L1-z2-mb1" in out and "+25" in out and "4.00" in out and "3.30" in out
    assert "timeout" in out and "dry" in out
    assert "median |error| 25.0% over 1 configs" in out
    assert "DeepSpeedCPUAdam 1200 M params/s" in out


def test_usage_errors_exit_2(acc, tmp_path) -> None:
    assert acc.main(["--dry", "--out", str(tmp_path), "--budget", "0"]) == 2
    assert acc.main(["--dry", "--out", str(tmp_path), "--only", "nothing-like-this"]) == 2
    assert acc.main(["--dry", "--out", str(tmp_path), "--step-limit", "45"]) == 2  # benches could not start
    assert not os.listdir(tmp_path)


def test_profile_placeholders_follow_what_earlier_steps_left(acc, tmp_path) -> None:
    run = _run(acc, tmp_path)
    argv = ["zt", "bench", "--profile", "@probe", "--json"]
    assert acc.resolve_argv(run, argv) == ["zt", "bench", "--json"], "no probe: the command's own default"
    (tmp_path / "probe.yaml").write_text("x")
    assert acc.resolve_argv(run, argv) == ["zt", "bench", "--profile", str(tmp_path / "probe.yaml"), "--json"]
    later = ["zt", "recommend", "--profile", "@calibrated-or-probe"]
    assert acc.resolve_argv(run, later)[-1] == str(tmp_path / "probe.yaml")
    (tmp_path / "calibrated.yaml").write_text("x")
    assert acc.resolve_argv(run, later)[-1] == str(tmp_path / "calibrated.yaml")


def test_step_limit_caps_each_step_and_its_commands_own_timeout(acc, tmp_path, monkeypatch) -> None:
    """A short lease: every step's limit is capped, and each command's own --timeout stays inside it
    (the command then ends itself and reports, rather than being killed)."""
    run = acc.Run(out=tmp_path, dry=False, force=False, budget_s=None, step_limit_s=90)
    steps = {s.name: s for s in acc.plan(run)}
    bench = steps[f"bench/{acc.GPU_GRID[0].id}"]
    assert bench.timeout_s == 480  # the step's own limit; execute() applies the cap
    own = float(bench.argv[bench.argv.index("--timeout") + 1])
    assert own == 60  # 90 s cap less the bench's 30 s margin
    probe = steps["probe"]
    assert float(probe.argv[probe.argv.index("--timeout") + 1]) == 70
    seen = {}

    def run_step(run, step, timeout):
        seen[step.name] = timeout
        return {"status": "ok"}

    monkeypatch.setattr(acc, "run_step", run_step)
    records = acc.execute(run, [steps["environment"], bench], say=lambda m: None)
    assert seen == {"environment": 90, bench.name: 90} and all(r["status"] == "ok" for r in records.values())
