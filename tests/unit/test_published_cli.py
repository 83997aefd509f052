"""The published suite reproduced from the CLI alone (issue 18): every run's `zerotune predict` command
(scripts/evidence/published_cli.py) gives the numbers the suite reports through the Python API
(scripts/evidence/published.py predict_run), so the suite's job options are all CLI options."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scripts.evidence import published, published_cli


@pytest.fixture(scope="module")
def suite(tmp_path_factory) -> list[tuple[published.Run, list[str], dict]]:
    """Each run with its command (files under a temporary folder) and predict_run's row."""
    out = tmp_path_factory.mktemp("published-cli")
    return [(run, argv, published.predict_run(run)) for run, argv in published_cli.commands(out)]


def test_every_suite_run_is_reproduced_by_its_command(cli, suite) -> None:
    """One pass over the suite: same workload, step time, tokens/s, per-GPU peak, the peak as the source's
    counter reads it (the figure the suite compares with the measured one), and fit verdict."""
    wrong = []
    for run, argv, row in suite:
        r = cli(*argv, "--json")
        if r.code != 0:
            wrong.append(f"{run.id}: exit {r.code}: zerotune {' '.join(argv)}\n{r.stderr}")
            continue
        doc = json.loads(r.stdout)
        workload = {k: v for k, v in doc["workload"].items() if k != "world_size"}
        expected = published.run_workload(run, row["precision"]).model_dump()
        memory = doc["memory"]
        fit = None if memory["gpu_capacity_bytes"] is None else memory["fit"]["reason"] != "gpu"
        counter = memory["counters"][run.measured.memory_kind] if run.measured.memory_kind else None
        got = (workload, doc["step_time_s"], doc["tokens_per_s"], memory["per_gpu_bytes"], fit, memory["safety_margin"], counter)
        want = (expected, row["predicted_step_s"], row["predicted_tokens_per_s"], row["predicted_memory_bytes"], row["fits"], 0, row["predicted_counter_bytes"])
        if got[0] != want[0] or got[3:] != want[3:] or got[1:3] != pytest.approx(want[1:3], rel=1e-9):
            wrong.append(f"{run.id}: CLI {got[1:]} != API {want[1:]}" + ("" if got[0] == want[0] else " (workload)"))
    assert not wrong, "\n".join(wrong)


def test_commands_name_files_a_user_has(suite) -> None:
    """The ds config is a file; a run whose box the source measured (same_box) names a profile file
    holding those measurements, the others a catalog profile."""
    for run, argv, _ in suite:
        assert json.loads(Path(argv[argv.index("--config") + 1]).read_text()) == published_cli.run_config(run)
        profile = argv[argv.index("--profile") + 1]
        assert (profile == run.profile) == (run.same_box is None), (run.id, profile)


def test_command_line_is_printed_for_every_run(tmp_path, capsys) -> None:
    published.main(["--commands", str(tmp_path)])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("zerotune predict ")]
    assert len(lines) == len(published.load_suite())
