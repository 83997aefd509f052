"""`zerotune calibrate --from-log` / `--measured`: the measurements read from real log lines (each
fixture names its thread), the fit on runs whose truth is known, the findings, provenance and the CLI."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from zerotune.calibrate.from_log import fit_logs
from zerotune.calibrate.log_terms import with_flops
from zerotune.calibrate.observation import Observation, predict, predict_peak
from zerotune.catalog.hardware import load_profile
from zerotune.catalog.models import load_model
from zerotune.catalog.trust import inputs_provenance
from zerotune.diagnose.measure import Figure, Measured, from_scan, parse_measured
from zerotune.diagnose.scan import scan_stream
from zerotune.dsconfig.settings import resolve
from zerotune.errors import InputError
from zerotune.schema.workload import Workload
from zerotune.units import GiB

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"


def measured_text(text: str) -> Measured:
    return from_scan(scan_stream(io.BytesIO(text.encode())))


def measured(path: Path) -> Measured:
    with path.open("rb") as stream:
        return from_scan(scan_stream(stream))


# ---- line formats (real excerpts) ----------------------------------------------------------------------------------


def test_breakdown_long_names_give_step_compute_optimizer_and_allreduce() -> None:
    m = measured(LOGS / "measure" / "ds3742_breakdown_long_names.log")  # DeepSpeed issue 3742
    assert m.step_s.value == pytest.approx((1961.44 + 3392.84 + 1371.42) / 1000)
    assert m.compute_s.value == pytest.approx((1961.44 + 1977.71) / 1000)
    assert m.optimizer_s.value == pytest.approx(1.37142)
    assert m.allreduce_s.value == pytest.approx(1.41507)
    assert m.step_s.source.startswith("log:6")  # the step line (6), not the micro-step one (5)


def test_short_timer_names_median_over_steps_drops_the_first() -> None:
    m = measured(LOGS / "synthetic" / "bench_healthy.log")  # zerotune bench's own DeepSpeed 0.19.8 output
    # three steps: fwd 253.57/222.34/338.58, the first dropped, median of the other two
    assert m.step_s.value == pytest.approx(
        ((222.34 + 338.58) / 2 + (342.56 + 300.14) / 2 + (151.36 + 205.96) / 2) / 1000
    )
    assert "3 steps, median" in m.step_s.source


def test_throughput_timer_new_and_old_formats() -> None:
    new = measured(LOGS / "real" / "ds2302_oom_stage1_steps.log")  # CurrSamplesPerSec (DeepSpeed issue 2302)
    assert new.samples_per_s.value == pytest.approx(2.1729161539995805)
    # MaxMemAllocated=0.02GB on the timer line; see_memory_usage's Max_MA 0.08 GB is the higher peak
    assert new.peak_bytes.value == pytest.approx(0.08 * GiB) and new.peak_kind == "max_allocated"
    old = measured(LOGS / "real" / "ds1825_throughput_ok.log")  # SamplesPerSec only (DeepSpeed issue 1825)
    assert old.samples_per_s.value == pytest.approx((83.48609168106144 + 83.73838805358588) / 2)
    assert old.peak_bytes.value == pytest.approx(9.02 * GiB)


def test_see_memory_usage_max_ma_is_the_peak() -> None:
    m = measured(LOGS / "measure" / "ds849_see_memory_usage.log")  # DeepSpeed PR 849
    assert m.peak_bytes.value == pytest.approx(0.26 * GiB)
    assert "see_memory_usage" in m.peak_bytes.source and not m.has_time


def test_tqdm_and_hf_final_metrics() -> None:
    bar = measured(LOGS / "measure" / "finetrainers111_tqdm.log")  # finetrainers issue 111
    assert bar.step_s.value == pytest.approx(72.77)
    final = measured(LOGS / "measure" / "hf_trainer_final_metrics.log")
    assert final.step_s.value == pytest.approx(5.10)  # tqdm's s/it wins over train_runtime
    with (LOGS / "measure" / "hf_trainer_final_metrics.log").open("rb") as stream:
        scan = scan_stream(stream)
    scan.series.pop("s_per_it")
    only_final = from_scan(scan)
    assert only_final.step_s.value == pytest.approx(1 / 0.196)
    assert any("train_runtime" in n for n in only_final.notes)


# Round 6 (2026-11-28, h-logs): log formats of threads never used before (first run before any change:
# every figure below but the Megatron line and the `[default0]:` prefix was read right).


def test_a_megatron_timer_line_is_not_deepspeeds_step() -> None:
    """DeepSpeed issue 650 posts Megatron's `forward | backward | optimizer` timers, then DeepSpeed's own
    step line: only the latter is the step (first read: 16.5 s, the two formats' medians mixed)."""
    m = measured(LOGS / "threads" / "ds650_zero2_10b_step_dominates.log")
    assert m.step_s.value == pytest.approx((1370.73 + 5053.64 + 11437.30) / 1000)
    assert m.optimizer_s.value == pytest.approx(11.4373) and m.step_s.source.startswith("log:6:")  # 4 `##` lines


def test_timer_lines_with_a_leading_space_and_extra_timers() -> None:
    m = measured(LOGS / "threads" / "ds1635_cpu_adam_step_timers.log")  # DeepSpeed issue 1635
    assert m.step_s.value == pytest.approx((376.60 + 864.56 + 22880.87) / 1000)
    assert m.optimizer_s.value == pytest.approx(22.88087) and m.compute_s.value == pytest.approx(1.18347)


def test_the_2020_throughput_line_and_bare_micro_step_timers() -> None:
    """DeepSpeed issue 255 (June 2020): `[INFO <date>] 0/2650, SamplesPerSec=...`, and micro-step timers
    with no step line: those are not a step time (a step sums an unknown number of micro-steps)."""
    m = measured(LOGS / "measure" / "ds255_old_samplespersec_timers.log")
    assert m.samples_per_s.value == pytest.approx((13.198177991591365 + 7.458824487454903) / 2)  # first dropped
    assert m.step_s is None and m.compute_s is None


def test_tqdm_and_timers_on_one_line() -> None:
    """accelerate issue 1589: tqdm's bar and the next log line share a line; tqdm switches to it/s."""
    m = measured(LOGS / "measure" / "accelerate1589_tqdm_timers_one_line.log")
    assert m.step_s.value == pytest.approx(((27.41 + 27.46) + (73.44 + 73.60) + (72.82 + 72.60)) / 2 / 1000)
    with (LOGS / "measure" / "accelerate1589_tqdm_timers_one_line.log").open("rb") as stream:
        scan = scan_stream(stream)
    assert scan.series["s_per_it"] == pytest.approx([1.23, 1 / 1.09])


@pytest.mark.parametrize(
    ("name", "peak_gb"),
    [
        ("ds522_see_memory_usage_stage0.log", 1.27),  # DeepSpeed issue 522: the highest Max_MA of the step
        ("dsexamples186_zero3_samplespersec_cache_flushes.log", 12.76),  # MaxMemAllocated on the timer line
    ],
)
def test_memory_peaks_of_fresh_logs(name: str, peak_gb: float) -> None:
    m = measured(LOGS / "measure" / name)
    assert m.peak_bytes.value == pytest.approx(peak_gb * GiB) and m.peak_kind == "max_allocated"


def test_the_2021_throughput_line_after_a_tqdm_bar() -> None:
    """DeepSpeed issue 1574: `0/2000, SamplesPerSec=9.54...` with no memory fields, a step line on the
    tqdm bar's line. The throughput timer wins over tqdm (docs: the order of trust)."""
    m = measured(LOGS / "measure" / "ds1574_t5_skipped_steps_old_throughput.log")
    assert m.samples_per_s.value == pytest.approx(9.546767962244255) and m.step_s is None
    with (LOGS / "measure" / "ds1574_t5_skipped_steps_old_throughput.log").open("rb") as stream:
        assert scan_stream(stream).series["s_per_it"] == pytest.approx([3.35])


def test_tqdm_with_a_postfix_and_a_role_prefix() -> None:
    bar = measured(LOGS / "measure" / "easycontext11_tqdm_cache_flush_one_line.log")  # EasyContext issue 11
    # the bars' clock, 16:59 at 1 and 34:38 at 2: 1059 s (the printed rates, 1019.75 and 1042.58, are
    # tqdm's moving average; read before round h-fromlog2)
    assert bar.step_s.value == pytest.approx(1059.0)
    with (LOGS / "measure" / "bigscience356_default_prefix_see_memory_usage.log").open("rb") as stream:
        scan = scan_stream(stream)
    assert len(scan.memory_reports) == 1 and scan.memory_reports[0].label == "Before Building Model"


def test_the_job_from_the_launchers_echo_of_the_script_arguments() -> None:
    """The DeepSpeed launcher echoes the training command (runner.py `cmd = ...`, launch.py's
    sigkill_handler list): its script arguments state the micro-batch, accumulation, sequence length and
    precision as a launch line does (first read: none of them)."""
    from zerotune.diagnose.analyse import Options, read_job

    def scan_of(path: Path):
        with path.open("rb") as stream:
            return scan_stream(stream)

    dolly = scan_of(LOGS / "measure" / "dolly166_sigkill_argv_list.log")  # `--per-device-train-batch-size 1`
    assert dolly.facts["micro_batch"].value == 1 and "training.trainer" in str(dolly.facts["launch_args"].value)
    baichuan = scan_of(LOGS / "threads" / "baichuan2_333_zero3_gather_oom_v100.log")  # Baichuan2 issue 333
    assert baichuan.facts["seq_len"].value == 256 and baichuan.facts["micro_batch"].value == 1
    job = read_job(baichuan, Options(), [])
    assert job.seq_len == 256 and "script's arguments" in job.seq_source
    said = read_job(baichuan, Options(seq_len=1024), [])  # an option still wins over the log
    assert said.seq_len == 1024 and said.seq_source == "--seq-len"


def test_the_job_from_training_arguments_repr() -> None:
    """transformers logs TrainingArguments one `name=value,` a line (huggingface/transformers#17607, behind a
    test harness's `stdout: ` prefix): accumulation and checkpointing are read from it, and only from a
    line that is the field (not from an argparse Namespace repr, where a field is mid-line)."""
    from zerotune.diagnose.analyse import Options, read_job

    with (LOGS / "measure" / "transformerspr17607_training_arguments_repr.log").open("rb") as stream:
        scan = scan_stream(stream)
    assert scan.facts["grad_accum"].value == 1 and "checkpointing" not in scan.facts  # False says nothing
    other = scan_stream(
        io.BytesIO(b"  per_device_train_batch_size=4,\n  gradient_checkpointing=True,\nNamespace(gradient_accumulation_steps=8, lr=1)\n")
    )
    assert other.facts["micro_batch"].value == 4 and "grad_accum" not in other.facts
    job = read_job(other, Options(), [])
    assert job.checkpointing is True and job.checkpointing_source.startswith("log:2")


def test_nvidia_smi_peak_is_the_highest_row() -> None:
    m = measured(LOGS / "measure" / "nvidia_smi_synthetic.log")
    assert m.peak_bytes.value == 63110 * 2**20 and m.peak_kind == "nvidia-smi"


def test_measured_figures_replace_the_logs() -> None:
    log = measured(LOGS / "measure" / "ds3742_breakdown_long_names.log")
    both = log.merged(parse_measured("tokens_per_s=5000,peak_memory=10GiB"))
    assert both.step_s is None and both.tokens_per_s.value == 5000 and both.compute_s == log.compute_s
    assert both.peak_bytes.value == 10 * GiB


def test_parse_measured() -> None:
    m = parse_measured("tokens_per_s=12000, peak_memory=61.5GiB, memory_kind=max_reserved")
    assert m.tokens_per_s.value == 12000 and m.peak_bytes.value == 61.5 * GiB and m.peak_kind == "max_reserved"
    bad_forms = ("tokens_per_s", "speed=3", "tokens_per_s=-1", "peak_memory=3furlongs", "memory_kind=rss", "")
    for bad in (*bad_forms, "peak_memory=...", "tokens_per_s=."):  # dots: an InputError, not a float() crash
        with pytest.raises(InputError):
            parse_measured(bad)


# ---- the fit ------------------------------------------------------------------------------------------------------


def _obs(micro: int, measured_: Measured, label: str = "run", stage: int = 3) -> Observation:
    spec = load_model("llama-7b")
    config = {"train_micro_batch_size_per_gpu": micro, "zero_optimization": {"stage": stage}, "bf16": {"enabled": True}}
    workload = Workload(seq_len=2048, micro_batch=micro, grad_accum=1, precision="bf16", gpus_per_node=8, nodes=1)
    return Observation(label, spec, workload, resolve(config).zero, measured_)


def _job(model: str, micro: int, seq: int, stage: int, measured_: Measured | None = None) -> Observation:
    config = {"train_micro_batch_size_per_gpu": micro, "zero_optimization": {"stage": stage}, "bf16": {"enabled": True}}
    workload = Workload(seq_len=seq, micro_batch=micro, grad_accum=1, precision="bf16", gpus_per_node=8, nodes=1)
    return Observation(f"{model}.log", load_model(model), workload, resolve(config).zero, measured_ or Measured())


def test_one_throughput_figure_moves_the_terms_by_their_shares_of_the_step() -> None:
    """The machine's host is 3x slower at DeepSpeed's per-step work than the profile says. One figure
    of a small job (the fixed cost most of its step) is explained mostly by the fixed cost, so a large
    job of its kind (compute most of its step: 64 x 1024 tokens per GPU) is predicted as the truth runs
    it; one factor on every time would have slowed its compute by the small job's miss (+19%). Another
    model takes the host costs at the other-kind weight (zerotune/model/carried.py: one figure cannot
    tell this machine-wide miss from its own job's), so it lands between the profile and the truth. The
    stage-2 run leaves the stage-3 hook where it was: the run does not exercise it."""
    base = load_profile("dgx-h100")
    truth = base.model_copy(update={"overheads": base.overheads.model_copy(update={"per_step_s": 3 * base.overheads.per_step_s})})
    small, big = _job("gpt2", 1, 512, 2), _job("gpt2", 64, 1024, 2)
    step = predict(small, truth).step_time_s
    fitted = fit_logs([_job("gpt2", 1, 512, 2, Measured(step_s=Figure(step, "log:7")))], base)
    assert predict(small, fitted.profile).step_time_s == pytest.approx(step, rel=1e-3)
    want = predict(big, truth).step_time_s
    assert predict(big, fitted.profile).step_time_s == pytest.approx(want, rel=0.05)
    scaled = predict(big, base).step_time_s * step / predict(small, base).step_time_s
    assert abs(scaled / want - 1) > 0.15  # what the one-factor fit predicted
    other = _job("llama-7b", 4, 2048, 2)
    assert predict(other, base).step_time_s < predict(other, fitted.profile).step_time_s < predict(other, truth).step_time_s
    moved = {v.path: v for v in fitted.values}
    assert moved["overheads.per_step_s"].calibrated > 2 * base.overheads.per_step_s
    assert moved["overheads.per_step_s"].source == "gpt2.log log:7"
    assert "overheads.per_module_hook_s" not in moved
    assert moved["overheads.step_scale"].calibrated == pytest.approx(1.0, abs=1e-3)  # the terms explain it
    said = inputs_provenance(fitted.profile, "bf16")
    assert "DeepSpeed overheads from your run (per_step_s" in said and "step time scale" not in said


def test_several_runs_put_their_difference_on_the_term_whose_share_differs() -> None:
    """The machine's per-step cost is a quarter of the profile's (a bare training loop, as
    bf16_master_weight's). Two small-model runs (the fixed cost most of their step) and two of a 7B model
    (compute most of it): each run's own move, averaged, left what the runs disagree on to one factor
    on every time, and the run held out from the other three was predicted up to 12% off (gpt2's runs
    from one gpt2 and two 7B runs); the runs' differences identify the per-step cost, so every run held
    out is predicted within 2.5% and the scale stays at 1."""
    base = load_profile("dgx-h100")
    truth = base.model_copy(update={"overheads": base.overheads.model_copy(update={"per_step_s": base.overheads.per_step_s / 4})})
    jobs = [("gpt2", 1, 512), ("gpt2", 2, 512), ("llama-7b", 1, 2048), ("llama-7b", 2, 2048)]
    runs = [_job(m, b, s, 2, Measured(step_s=Figure(predict(_job(m, b, s, 2), truth).step_time_s, f"log:{b}"))) for m, b, s in jobs]
    for k, (m, b, s) in enumerate(jobs):
        fitted = fit_logs(runs[:k] + runs[k + 1 :], base).profile
        held = _job(m, b, s, 2)
        assert predict(held, fitted).step_time_s == pytest.approx(predict(held, truth).step_time_s, rel=0.025)
        assert fitted.overheads.step_scale == pytest.approx(1.0, abs=0.01)
        assert fitted.overheads.per_step_s < 0.4 * base.overheads.per_step_s


def test_a_figure_faster_than_the_peak_allows_moves_the_other_terms() -> None:
    """FLOP/s stays under the GPU's peak; the rest of the miss goes to the terms that can still move
    (and, with every one on its bound, to one factor), so the run is still reproduced."""
    base = load_profile("dgx-h100")
    ran = _obs(2, Measured())
    step = predict(ran, base).step_time_s / 5
    fitted = fit_logs([_obs(2, Measured(step_s=Figure(step, "log:7")), "a.log")], base)
    assert predict(ran, fitted.profile).step_time_s == pytest.approx(step, rel=1e-3)
    flops = next(v for v in fitted.values if v.path == "compute.achieved_flops.bf16")
    assert flops.calibrated == pytest.approx(base.gpu.peak_bf16_flops) and "ceiling" in flops.note


def test_compute_timers_fit_flops_within_the_peak() -> None:
    base = load_profile("dgx-h100")
    slow = with_flops(base, "bf16", 0.5)
    obs = _obs(2, Measured())
    compute = predict(obs, slow).compute_s
    fitted = fit_logs([_obs(2, Measured(compute_s=Figure(compute, "log:3")))], base).profile
    assert predict(obs, fitted).compute_s == pytest.approx(compute, rel=1e-3)
    fast = fit_logs([_obs(2, Measured(compute_s=Figure(compute / 100, "log:3")))], base)
    value = next(v for v in fast.values if v.path == "compute.achieved_flops.bf16")
    assert value.calibrated == pytest.approx(base.gpu.peak_bf16_flops) and "ceiling" in value.note


def test_a_launch_bound_compute_timer_moves_the_launch_cost_not_flops() -> None:
    """A small GPU job whose blocks are launch-bound (a block costs the larger of its kernels and its
    host launches): the machine launches 4x faster than the prior. Its compute timer is the launches',
    so FLOP/s up to the peak could not make it up (the fit before put FLOP/s on the peak and the rest on
    a factor, and predicted a kernel-bound job 36% fast); shared by the terms' shares, the launch cost
    moves and the larger job is predicted as the truth runs it."""
    base = load_profile("dgx-h100")
    ov = base.overheads
    truth = base.model_copy(update={"overheads": ov.model_copy(update={"per_layer_launch_s": ov.per_layer_launch_s / 4})})
    small, big = _job("llama-7b", 1, 256, 2), _job("llama-7b", 2, 1024, 2)
    e = predict(small, truth)
    assert e.compute_s < 0.5 * predict(small, base).compute_s  # the prior's launches set the small job's compute
    timers = Measured(
        step_s=Figure(e.step_time_s, "log:9"),
        compute_s=Figure(e.compute_s, "log:9"),
        allreduce_s=Figure(e.exposed_comm_s, "log:9") if e.exposed_comm_s > 0 else None,
        optimizer_s=Figure(e.step_time_s - e.compute_s - e.exposed_comm_s, "log:9"),
    )
    fit = fit_logs([_job("llama-7b", 1, 256, 2, timers)], base)
    moved = {v.path: v for v in fit.values}
    assert moved["overheads.per_layer_launch_s"].calibrated == pytest.approx(ov.per_layer_launch_s / 4, rel=0.05)
    assert moved["compute.achieved_flops.bf16"].calibrated < 1.1 * moved["compute.achieved_flops.bf16"].probed
    assert predict(big, fit.profile).step_time_s == pytest.approx(predict(big, truth).step_time_s, rel=0.03)


def _offload_job(measured_: Measured | None = None) -> Observation:
    config = {
        "train_micro_batch_size_per_gpu": 1,
        "bf16": {"enabled": True},
        "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}},
    }
    workload = Workload(seq_len=2048, micro_batch=1, grad_accum=1, precision="bf16", gpus_per_node=8, nodes=1)
    return Observation("offload.log", load_model("llama-7b"), workload, resolve(config).zero, measured_ or Measured())


def test_a_parameter_offload_run_moves_the_copy_rate_within_the_link() -> None:
    """The machine's host<->device copies run at a third of the profile's rate. A stage-3 parameter-
    offload run's step waits on them, so its figure moves the copy rate (both directions, one factor)
    with the other terms it exercises (before, the copies took no share and FLOP/s took theirs); a run
    many times faster than the profile leaves the copy rate at the PCIe link's nominal rate (gen5 x16
    on the DGX H100: 63 GB/s), no higher."""
    base = load_profile("dgx-h100")
    h = base.host
    slow = base.model_copy(update={"host": h.model_copy(update={"h2d_pinned_Bps": h.h2d_pinned_Bps / 3, "d2h_pinned_Bps": h.d2h_pinned_Bps / 3})})
    step = predict(_offload_job(), slow).step_time_s
    assert step > 1.2 * predict(_offload_job(), base).step_time_s  # the copies are a share of its step
    fit = fit_logs([_offload_job(Measured(step_s=Figure(step, "log:4")))], base)
    moved = {v.path: v for v in fit.values}
    copy = moved["host.h2d_pinned_Bps"].calibrated / h.h2d_pinned_Bps
    assert copy < 0.9 and moved["host.d2h_pinned_Bps"].calibrated / h.d2h_pinned_Bps == pytest.approx(copy)
    assert predict(_offload_job(), fit.profile).step_time_s == pytest.approx(step, rel=1e-3)
    fast = fit_logs([_offload_job(Measured(step_s=Figure(step / 20, "log:4")))], base)
    top = next(v for v in fast.values if v.path == "host.h2d_pinned_Bps")
    assert top.calibrated == pytest.approx(16 * 3.938e9) and "ceiling" in top.note


def test_a_run_far_outside_the_band_is_a_finding() -> None:
    base = load_profile("dgx-h100")
    obs = _obs(2, Measured())
    step = predict(obs, base).step_time_s * 3
    found = fit_logs([_obs(2, Measured(step_s=Figure(step, "log:9")), "slow.log")], base)
    assert len(found.findings) == 1 and "slow.log" in found.findings[0] and "slow node" in found.findings[0]


def test_the_band_is_judged_in_throughput_as_it_was_measured() -> None:
    """The stated band is a throughput band (|predicted tokens/s / measured - 1|, loso.py). A run 1.35x as
    slow as predicted is 35% off in throughput (outside the catalog's 30.2%) but 26% in step time (inside):
    a finding; one 1.35x as fast is 26% off in throughput: none."""
    from zerotune.catalog.trust import CATALOG_ERROR_PCT

    base = load_profile("dgx-h100")
    step = predict(_obs(2, Measured()), base).step_time_s
    assert 1 - 1 / 1.35 < CATALOG_ERROR_PCT / 100 < 0.35
    slow = fit_logs([_obs(2, Measured(step_s=Figure(1.35 * step, "log:9")), "slow.log")], base)
    fast = fit_logs([_obs(2, Measured(step_s=Figure(step / 1.35, "log:9")), "fast.log")], base)
    assert len(slow.findings) == 1 and "throughput +35%" in slow.findings[0] and "slow node" in slow.findings[0]
    assert fast.findings == []


def test_a_later_log_is_checked_against_the_band_of_its_kind_of_job() -> None:
    """A profile calibrated on one run, then a second log: a run of the first run's kind 20% off is
    outside that kind's band (a finding), a run of another stage 20% off is inside the other kinds' one."""
    from zerotune.calibrate.from_log import ONE_RUN_OTHER_JOB_ERROR_PCT, ONE_RUN_SAME_JOB_ERROR_PCT

    assert ONE_RUN_SAME_JOB_ERROR_PCT < 20 < ONE_RUN_OTHER_JOB_ERROR_PCT
    base = load_profile("dgx-h100")
    first = _obs(2, Measured(step_s=Figure(predict(_obs(2, Measured()), base).step_time_s, "log:7")), "a.log")
    one = fit_logs([first], base).profile

    def later(stage: int) -> list[str]:
        step = predict(_obs(4, Measured(), stage=stage), one).step_time_s * 1.2
        return fit_logs([_obs(4, Measured(step_s=Figure(step, "log:9")), "b.log", stage=stage)], one).findings

    same = later(3)
    assert len(same) == 1 and "b.log" in same[0] and f"+-{ONE_RUN_SAME_JOB_ERROR_PCT:.0f}%" in same[0]
    assert later(2) == []


def test_memory_slack_needs_runs_that_agree() -> None:
    base = load_profile("dgx-h100")
    runs = [_obs(m, Measured()) for m in (1, 2, 4)]
    gap = 3 * GiB
    agree = [_obs(o.workload.micro_batch, Measured(peak_bytes=Figure(predict_peak(o, base) + gap, "log:1"))) for o in runs]
    fitted = fit_logs(agree, base)
    assert fitted.profile.gpu.memory_slack_bytes == pytest.approx(gap, abs=2)
    other = _obs(8, Measured(peak_bytes=Figure(1.0, "x")))
    assert predict_peak(other, fitted.profile) == pytest.approx(predict_peak(other, base) + gap, abs=2)
    one = fit_logs(agree[:1], base)
    assert one.profile.gpu.memory_slack_bytes is None and any("one run" in n for n in one.notes)
    scattered = [
        _obs(o.workload.micro_batch, Measured(peak_bytes=Figure(predict_peak(o, base) + g, "log:1")))
        for o, g in zip(runs, (-8 * GiB, 9 * GiB, 0), strict=True)
    ]
    assert fit_logs(scattered, base).profile.gpu.memory_slack_bytes is None


def test_runs_costed_alike_that_measured_apart_contradict_each_other() -> None:
    """Two ZeRO-3 runs that differ only in gradient accumulation hold the same live bytes at every phase
    (the estimate's timeline), so a model miss is the same for both: 39 and 64 GiB measured (the shape of
    the chenyaofo gist's mbs8 rows) cannot both be the job their configs say. A finding, and the pair is
    left out of the memory slack; runs of different micro-batches are not compared so."""

    def run(micro: int, accum: int, label: str, peak: float) -> Observation:
        config = {"train_micro_batch_size_per_gpu": micro, "gradient_accumulation_steps": accum,
                  "zero_optimization": {"stage": 3}, "bf16": {"enabled": True}}  # fmt: skip
        workload = Workload(seq_len=4096, micro_batch=micro, grad_accum=accum, precision="bf16", gpus_per_node=8, nodes=1)
        return Observation(label, load_model("llama-7b"), workload, resolve(config).zero, Measured(peak_bytes=Figure(peak, "log:3")))

    base = load_profile("dgx-a100-80g")
    assert predict_peak(run(8, 1, "x", 1.0), base) == pytest.approx(predict_peak(run(8, 2, "x", 1.0), base), rel=1e-6)
    fit = fit_logs([run(8, 1, "a.log", 39.1 * GiB), run(8, 2, "b.log", 63.9 * GiB), run(4, 2, "c.log", 30 * GiB)], base)
    assert len(fit.findings) == 1 and "a.log and b.log" in fit.findings[0] and "contradict" in fit.findings[0]
    assert any("2 runs left out of the memory slack" in n for n in fit.notes)
    assert fit.profile.gpu.memory_slack_bytes is None  # one run left: nothing it could tell apart


def test_runs_of_one_kind_whose_step_ratios_are_further_apart_than_the_band_contradict_each_other() -> None:
    """Three ZeRO-3 llama-7b runs (one kind: the model costs them alike) measured 1.00x, 1.10x and 1.60x
    their predicted step: the 1.60x run is further from each than two runs within the 13.4% same-kind band
    can be (1.134 / 0.866 = 1.31x), the first two are not; a stage-2 run at 1.60x is another kind and is
    not compared. Findings only: the fit is what fit_runs gives without them."""
    from zerotune.calibrate.from_log import fit_runs, step_contradictions

    base = load_profile("dgx-h100")

    def run(micro: int, ratio: float, label: str, stage: int = 3) -> Observation:
        o = _obs(micro, Measured(), label, stage)
        return _obs(micro, Measured(step_s=Figure(predict(o, base).step_time_s * ratio, "log:7")), label, stage)

    runs = [run(2, 1.0, "a.log"), run(4, 1.1, "b.log"), run(8, 1.6, "c.log"), run(8, 1.6, "d.log", stage=2)]
    lines = step_contradictions(runs, base)
    assert len(lines) == 2
    assert lines[0].startswith("runs contradict each other: a.log measured 1.00x its predicted step time, c.log 1.60x")
    assert "b.log measured 1.10x" in lines[1] and "c.log 1.60x" in lines[1] and "same model, stage" in lines[1]
    # just inside and just outside the bound
    assert step_contradictions([run(2, 1.0, "a.log"), run(4, 1.30, "b.log")], base) == []
    assert len(step_contradictions([run(2, 1.0, "a.log"), run(4, 1.32, "b.log")], base)) == 1
    fit = fit_logs(runs, base)
    assert sum(f in lines for f in fit.findings) == 2
    assert [v.model_dump() for v in fit.values] == [v.model_dump() for v in fit_runs(runs, base)[1]]


def test_bigscience_micro_batch_4_contradicts_its_same_day_runs() -> None:
    """BigScience's 52B GPT-2 on 64 V100s (data/published/runs.yaml, read as the evidence script reads
    it): micro-batch 4 measured 2.28x its predicted step time, the other five no-offload runs of the same
    kind 0.94-1.11x; every pair with it is a finding, no pair without it."""
    from scripts.evidence.calibrate_from_log import observation
    from scripts.evidence.published import load_suite
    from zerotune.calibrate.from_log import step_contradictions

    found = [observation(r) for r in load_suite() if r.id.startswith("bigscience-hf-gpt2-52b-z3-64xv100")]
    obs = [o for o, _ in filter(None, found)]
    lines = step_contradictions(obs, found[0][1])
    odd = "bigscience-hf-gpt2-52b-z3-64xv100-mbs4-nooffl"
    assert len(lines) == 5 and all(f"{odd} measured" in line or f"{odd} 2." in line for line in lines)


def test_predict_says_which_numbers_come_from_the_users_run() -> None:
    base = load_profile("dgx-h100")
    step = predict(_obs(2, Measured()), base).step_time_s * 1.2
    fitted = fit_logs([_obs(2, Measured(step_s=Figure(step, "log:7")), "a.log")], base).profile
    assert fitted.calibration.values[-1].source == "a.log log:7"
    text = inputs_provenance(fitted, "bf16")
    assert "FLOP/s bf16 from your run (a.log log:7)" in text


# ---- the command --------------------------------------------------------------------------------------------------


def test_cli_from_log_writes_a_profile_once(cli, tmp_path) -> None:
    config = tmp_path / "ds.json"
    config.write_text(json.dumps({"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2}}))
    out = tmp_path / "calibrated.yaml"
    log = LOGS / "synthetic" / "bench_healthy.log"
    args = ("calibrate", "--from-log", log, "--config", config, "--model", "gpt2", "--profile", "dgx-h100",
            "--world-size", "8", "--seq-len", "512", "--no-checkpointing", "--no-cache", "--out", out)  # fmt: skip
    r = cli(*args, "--json")
    assert r.code in (0, 1), r.stderr
    doc = json.loads(r.stdout)
    assert {v["path"] for v in doc["moved"]} >= {"overheads.step_scale", "compute.achieved_flops.bf16"} or doc["moved"]
    assert all(v["source"].startswith(str(log)) for v in doc["moved"])
    assert out.is_file() and "bench_healthy.log" in out.read_text()
    again = cli(*args)
    assert again.code == 2 and "already exists" in again.stderr
    missing = cli("calibrate", "--from-log", log, "--model", "gpt2", "--no-cache")
    assert missing.code == 2 and "--config" in missing.stderr


# ---- a `zerotune bench --log` run: its log says the job it ran -----------------------------------------------------

BENCH_LOG = LOGS / "measure" / "zerotune_bench_s0_ga2.log"  # `zerotune bench --log`, design run s0-ga2-big


def _cpu_profile(tmp_path: Path) -> Path:
    """The probe profile of a real calibrate round on the 2-core testbed (tests/fixtures/calibrate)."""
    from zerotune.catalog.hardware import dump_profile
    from zerotune.schema.hardware import HardwareProfile

    base = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "calibrate" / "loaded_runs.json").read_text())
    path = tmp_path / "probe.yaml"
    path.write_text(dump_profile(HardwareProfile.model_validate(base["base"])))
    return path


def test_the_bench_job_line_gives_the_proxy_config_world_and_sequence() -> None:
    from zerotune.catalog.models import derive
    from zerotune.diagnose.analyse import Options, read_job

    with BENCH_LOG.open("rb") as stream:
        scan = scan_stream(stream)
    notes: list[str] = []
    job = read_job(scan, Options(), notes)
    # the proxy the design run s0-ga2-big ran: no catalog model has its shape
    assert job.spec.name == "llama-7b/2L/w0.125" and job.spec.hidden_size == 512 and job.spec.num_layers == 2
    assert job.spec.params == derive(load_model("llama-7b"), num_layers=2, width_scale=0.125).params
    r = resolve(job.config)
    assert (r.zero.stage, r.micro_batch, r.grad_accum, r.precision) == (0, 2, 2, "fp32")
    assert (job.world, job.seq_len, job.checkpointing) == (2, 256, False)
    assert all(s.startswith("log:5, the job `zerotune bench` ran") for s in
               (job.config_source, job.spec_source, job.world_source, job.seq_source, job.checkpointing_source))
    said = read_job(scan, Options(seq_len=512, world_size=4, checkpointing=True), notes)
    assert (said.seq_len, said.world, said.checkpointing) == (512, 4, True)  # the flags win
    # the line's JSON is the bench's alone: its config keys do not read as facts of the job
    assert "zero_stage" not in scan.facts and not notes


def test_cli_from_log_on_a_bench_log_needs_no_job_flags(cli, tmp_path) -> None:
    out = tmp_path / "from-log.yaml"
    r = cli("calibrate", "--from-log", BENCH_LOG, "--profile", _cpu_profile(tmp_path), "--no-cache", "--out", out,
            "--json")  # fmt: skip
    assert r.code in (0, 1), r.stderr
    doc = json.loads(r.stdout)
    assert any("llama-7b/2L/w0.125" in item for item in doc["runs"][0]["job"])
    moved = {v["path"] for v in doc["moved"]}
    # stage 0's timers: compute (fwd + bwd_inner), the optimizer (step), the all-reduce (bwd_allreduce)
    assert {"compute.achieved_flops.fp32", "overheads.optimizer_params_per_s",
            "intra_node.collectives.all_reduce.busbw_Bps", "overheads.step_scale"} <= moved  # fmt: skip
    assert out.is_file()
    gpu = cli("calibrate", "--from-log", BENCH_LOG, "--profile", "dgx-h100", "--no-cache")
    assert gpu.code == 2 and "CPU ranks" in gpu.stderr and "--profile" in gpu.stderr


def test_a_collective_probed_above_the_ceiling_does_not_cap_the_others(tmp_path) -> None:
    """A quick probe measured all_to_all through loopback gloo at 7x the host's memory bandwidth
    (2026-11-27); the all-reduce factor the timer identifies must not be held down by it."""
    from zerotune.calibrate.bounds import busbw_ceiling
    from zerotune.calibrate.observe import observations
    from zerotune.diagnose.analyse import Options

    base = load_profile(str(_cpu_profile(tmp_path)))
    ceiling = busbw_ceiling(base, "intra_node")[0]
    link = base.intra_node
    odd = link.collectives["all_to_all"].model_copy(update={"busbw_Bps": 7 * ceiling})
    bad = base.model_copy(update={"intra_node": link.model_copy(update={"collectives": {**link.collectives, "all_to_all": odd}})})
    runs = observations([str(BENCH_LOG)], None, Options(), base, [])

    def all_reduce(profile) -> float:
        return fit_logs(runs, profile).profile.intra_node.collectives["all_reduce"].busbw_Bps

    assert all_reduce(bad) == pytest.approx(all_reduce(base), rel=1e-6)
    assert all_reduce(base) != pytest.approx(base.intra_node.collectives["all_reduce"].busbw_Bps, rel=0.01)


def test_predict_and_recommend_quote_the_calibrations_error_not_the_published_band(cli, tmp_path) -> None:
    """A profile calibrated on the user's run: its stated step-time error replaces the published
    category band in predict's and recommend's expected error, and they say where it comes from."""
    from zerotune.catalog.hardware import dump_profile
    from zerotune.catalog.trust import expected_error, quoted_error
    from zerotune.model.band import job_band

    base = load_profile("dgx-h100")
    step = predict(_obs(2, Measured()), base).step_time_s * 1.2
    fitted = fit_logs([_obs(2, Measured(step_s=Figure(step, "log:7")), "a.log")], base).profile
    stated = fitted.calibration.expected_error_pct  # one run: the published one-run evidence
    assert expected_error(fitted) == (stated, "calibrated on your run(s)")
    band = job_band(load_model("llama-7b"), _obs(2, Measured()).workload, False)
    assert band is not None and band.throughput * 100 != pytest.approx(stated)  # so the two can be told apart
    quoted = quoted_error(fitted, band)
    line, doc = quoted.line, quoted.doc
    assert quoted.throughput_pct == pytest.approx(stated)
    assert f"±{stated:.0f}%" in line and "your run" in line and "not the published band" in line
    assert doc["throughput"] == pytest.approx(stated / 100) and doc["published_throughput"] == band.throughput
    assert doc["memory"] == band.memory  # no run states a memory error: the band's stays
    catalog = quoted_error(base, band)  # a catalog profile: the band
    assert (catalog.line, catalog.doc, catalog.throughput_pct) == (band.line(), band.as_dict(), band.throughput * 100)
    path = tmp_path / "from-log.yaml"
    path.write_text(dump_profile(fitted))
    job = ("--model", "llama-7b", "--profile", path, "--gpus", "8", "--seq-len", "2048")
    config = tmp_path / "ds.json"
    config.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 3},
                                  "bf16": {"enabled": True}}))  # fmt: skip
    # the job predicted knows its kind: the run's kind (llama-7b, stage 3, no offload, checkpointing: the
    # default of predict and of Workload) gets the one-run error of that regime, another stage the other's
    cal = fitted.calibration
    said = json.loads(cli("predict", *job, "--config", config, "--json").stdout)["expected_error"]
    assert said["throughput"] == pytest.approx(cal.same_job_error_pct / 100) and "your run" in said["throughput_from"]
    assert "this job of its kind" in said["throughput_from"]
    text = cli("predict", *job, "--config", config).stdout
    assert "from this profile's calibration on your run(s)" in " ".join(text.split())
    stage2 = tmp_path / "ds2.json"
    stage2.write_text(config.read_text().replace('"stage": 3', '"stage": 2'))
    other = json.loads(cli("predict", *job, "--config", stage2, "--json").stdout)["expected_error"]
    assert other["throughput"] == pytest.approx(cal.other_job_error_pct / 100)
    assert "of another kind of job (llama-7b, stage 3" in other["throughput_from"]
    assert cal.other_job_weight is not None  # it says that the run's host costs reach this job at a weight
    assert f"host costs at weight {cal.other_job_weight:.2f}" in other["throughput_from"]
    rec = json.loads(cli("recommend", *job, "--json").stdout)["expected_error"]
    assert rec["throughput"] * 100 in (pytest.approx(cal.same_job_error_pct), pytest.approx(cal.other_job_error_pct))
    assert "your run" in rec["throughput_from"]


def test_one_run_states_its_error_by_the_kind_of_job_predicted() -> None:
    """One run's calibration carries to jobs of its kind (model, stage, offload, checkpointing), not across
    kinds (scripts/evidence/calibrate_from_log.py): the profile records the run's kind and both errors;
    several runs state their leave-one-out error whatever the job, and so does one run whose timers were
    fitted term by term (the regimes were measured on throughput figures: one factor on every time)."""
    from zerotune.calibrate.from_log import (
        ONE_RUN_ERROR_PCT,
        ONE_RUN_OTHER_JOB_ERROR_PCT,
        ONE_RUN_SAME_JOB_ERROR_PCT,
    )
    from zerotune.catalog.trust import from_your_runs, job_kind

    assert ONE_RUN_SAME_JOB_ERROR_PCT < ONE_RUN_ERROR_PCT < ONE_RUN_OTHER_JOB_ERROR_PCT
    # what they state is the recorded evidence (scripts/evidence/calibrate_from_log.py --write)
    recorded = json.loads((Path(__file__).resolve().parents[2] / "data" / "evidence" / "calibrate_from_log.json").read_text())
    assert abs(ONE_RUN_ERROR_PCT - recorded["overall"]["tput_after_pct"]) <= 0.5
    assert abs(ONE_RUN_SAME_JOB_ERROR_PCT - recorded["overall"]["tput_after_same_job_pct"]) <= 0.5
    assert abs(ONE_RUN_OTHER_JOB_ERROR_PCT - recorded["overall"]["tput_after_other_job_pct"]) <= 0.5
    # the weight a job of another kind takes the host costs at comes from the fit carried in full
    from zerotune.calibrate.from_log import CARRIED_IN_FULL_OTHER_JOB_ERROR_PCT

    assert abs(CARRIED_IN_FULL_OTHER_JOB_ERROR_PCT - recorded["overall"]["tput_in_full_other_job_pct"]) <= 0.5
    assert recorded["overall"]["tput_after_pct"] < recorded["overall"]["tput_in_full_pct"]
    assert recorded["by_regime"]["same"]["tput_after_pct"] <= recorded["by_regime"]["same"]["tput_in_full_pct"]
    base = load_profile("dgx-h100")
    step = predict(_obs(2, Measured()), base).step_time_s * 1.2
    one = fit_logs([_obs(2, Measured(step_s=Figure(step, "log:7")), "a.log")], base).profile
    same = job_kind("llama-7b", 3, "none", "none", True)  # Workload checkpoints activations by default
    assert one.calibration.jobs == [same]
    assert one.calibration.expected_error_pct == ONE_RUN_ERROR_PCT  # a caller that does not know the job
    assert from_your_runs(one)[0] == ONE_RUN_ERROR_PCT
    assert from_your_runs(one, same)[0] == ONE_RUN_SAME_JOB_ERROR_PCT
    for other in (
        job_kind("llama-7b", 2, "none", "none", True),
        job_kind("llama-7b", 3, "cpu", "none", True),
        job_kind("llama-7b", 3, "none", "none", False),
        job_kind("llama-13b", 3, "none", "none", True),
    ):
        assert from_your_runs(one, other)[0] == ONE_RUN_OTHER_JOB_ERROR_PCT
    # offload DeepSpeed ignores is not a different job: stage 0 has no optimizer offload, stage 2 no param offload
    assert job_kind("m", 0, "cpu", "cpu", False) == job_kind("m", 0, "none", "none", False)
    assert job_kind("m", 2, "cpu", "cpu", False) == job_kind("m", 2, "cpu", "none", False)
    runs = [_obs(m, Measured(step_s=Figure(predict(_obs(m, Measured()), base).step_time_s * 1.2, "log:7")), f"{m}.log")
            for m in (1, 2, 4)]  # fmt: skip
    several = fit_logs(runs, base).profile.calibration
    assert several.same_job_error_pct is None and several.other_job_error_pct is None
    timed = Measured(step_s=Figure(step, "log:7"), compute_s=Figure(step / 2, "log:7"))  # timers: term by term
    assert fit_logs([_obs(2, timed, "t.log")], base).profile.calibration.same_job_error_pct is None
    assert from_your_runs(fit_logs(runs, base).profile, job_kind("llama-7b", 1, "none", "none", True))[0] == (
        several.expected_error_pct
    )


def test_timers_put_the_left_over_on_the_fixed_cost_not_on_every_time() -> None:
    """A GPU run whose wall_clock_breakdown timers cover its whole step (fwd + bwd + step): the
    profile's 0.30 s per-step prior is already inside them. Fitted term by term, the fixed cost left
    over is ~0, and a job of another size is predicted as the truth does; one factor on every time
    (the fit before) would have shrunk compute and optimizer to pay for the prior."""
    base = load_profile("dgx-h100")
    assert (base.overheads.per_step_s or 0) > 0.1  # the published global prior
    truth = with_flops(base, "bf16", 0.8).model_copy(
        update={"overheads": base.overheads.model_copy(update={"per_step_s": 0.0, "per_micro_step_s": 0.0})}
    )
    ran = _obs(2, Measured())
    e = predict(ran, truth)
    timers = Measured(
        step_s=Figure(e.step_time_s, "log:9"),
        compute_s=Figure(e.compute_s, "log:9"),
        allreduce_s=Figure(e.exposed_comm_s, "log:9") if e.exposed_comm_s > 0 else None,
        optimizer_s=Figure(e.step_time_s - e.compute_s - e.exposed_comm_s, "log:9"),
    )
    fit = fit_logs([_obs(2, timers, "timed.log")], base)
    moved = {v.path: v for v in fit.values}
    assert moved["overheads.per_step_s"].calibrated < 0.01
    assert moved["overheads.step_scale"].calibrated == pytest.approx(1.0, abs=0.01)
    other = _obs(8, Measured())
    assert predict(other, fit.profile).step_time_s == pytest.approx(predict(other, truth).step_time_s, rel=0.03)


def test_a_bench_log_says_which_optimizer_its_ranks_ran(tmp_path) -> None:
    """The H200 bench logs (data/gpu/2026-11-28-NVIDIA-H200/bench/*.log): their job line's config has no
    optimizer section, which `zerotune bench` removes exactly when its ranks pass torch's AdamW, so the
    job read back (diagnose and calibrate --from-log alike) is a torch optimizer's; with the section kept
    (DeepSpeed built its own Adam) it is not."""
    from zerotune.calibrate.observe import observations
    from zerotune.diagnose.analyse import Options

    log = Path(__file__).resolve().parents[2] / "data/gpu/2026-11-28-NVIDIA-H200/bench/llama-7b-L4-z0-mb1.log"
    profile = load_profile(str(log.parents[1] / "probe.yaml"))
    none = Options(config=None, model=None, profile=None, seq_len=None, world_size=None, checkpointing=None)
    (obs,) = observations([str(log)], None, none, profile, [])
    assert obs.workload.torch_optimizer
    text = log.read_text()
    head, _, rest = text.partition("\n")
    job = json.loads(head.removeprefix("ZEROTUNE BENCH JOB "))
    job["config"]["optimizer"] = {"type": "AdamW", "params": {"lr": 1e-4}}
    fused = tmp_path / "fused.log"
    fused.write_text("ZEROTUNE BENCH JOB " + json.dumps(job) + "\n" + rest)
    (obs,) = observations([str(fused)], None, none, profile, [])
    assert not obs.workload.torch_optimizer


def test_the_old_throughput_field_is_named_as_read() -> None:
    """DeepSpeed before 0.6 printed `SamplesPerSec=`, a running mean since the timer's start step, not the
    per-step CurrSamplesPerSec: the figure says which it read (it said CurrSamplesPerSec for both)."""
    old = measured_text("[2021-11-26 03:07:16,494] [INFO] [timer.py:181:stop] 0/2000, SamplesPerSec=9.526738918021234\n")
    assert old.samples_per_s is not None and "SamplesPerSec (running mean" in old.samples_per_s.source
    new = measured_text(
        "[2022-12-20 08:26:26,101] [INFO] [timer.py:197:stop] 0/17, RunningAvgSamplesPerSec=158.3, "
        "CurrSamplesPerSec=159.6, MemAllocated=1.75GB, MaxMemAllocated=2.6GB\n"
    )
    assert new.samples_per_s is not None and new.samples_per_s.source.endswith("DeepSpeed CurrSamplesPerSec")


def test_a_run_under_memory_pressure_says_so() -> None:
    """ZeRO-3's allocator cache flushes slow the steps a --from-log fit is made from: the measurement says so
    (DeepSpeedExamples#186's log gave its SamplesPerSec with no word of the flushes after it)."""
    text = (
        "[2022-07-13 21:09:08,702] [INFO] [timer.py:193:stop] 0/50, SamplesPerSec=8.5, MemAllocated=0.9GB, MaxMemAllocated=12.7GB\n"
        "[2022-07-13 21:09:13,651] [WARNING] [stage3.py:2391:step] 3 pytorch allocator cache flushes since last step. "
        "this happens when there is high memory pressure and is detrimental to performance. If you are unable to make "
        "the cache flushes go away consider adding torch.cuda.empty_cache() calls in your training loop\n"
    )
    found = measured_text(text)
    assert any("3 PyTorch allocator cache flushes" in n for n in found.notes)
    assert measured_text(text.splitlines(keepends=True)[0]).notes == ()


# Round 7 (2026-11-28, h-fromlog2): 16 real logs never used before (tests/fixtures/logs/measure/real,
# manifest.yaml; first-sight table in docs/commands/calibrate.md). Each test below failed before its fix.


def real(name: str) -> Measured:
    return measured(LOGS / "measure" / "real" / name)


def test_hf_final_metrics_quoted_and_as_the_log_metrics_block() -> None:
    """transformers prints the final speed metrics as a dict (numbers, or strings where the caller formats
    them: LlamaFactory PR 10488) and again one a line (Trainer.log_metrics, the runtime as a timedelta)."""
    lf = real("llamafactory10488_train_metrics_string_values.log")
    assert lf.step_s.value == pytest.approx(1 / 0.185) and "train_steps_per_second" in lf.step_s.source
    block = scan_stream(
        io.BytesIO(b"***** train metrics *****\n  epoch                    =        1.0\n"
                   b"  train_runtime            = 1 day, 2:03:04.56\n  train_steps_per_second   =       0.05\n")
    )
    assert block.facts["train_runtime_s"].value == pytest.approx(26 * 3600 + 3 * 60 + 4.56)
    assert from_scan(block).step_s.value == pytest.approx(20.0)
    quoted = measured_text("{'train_runtime': '812.3', 'train_steps_per_second': '0.4', 'epoch': '2.0'}\n")
    assert quoted.step_s.value == pytest.approx(2.5)


def test_memory_reports_of_building_the_engine_are_not_the_step_peak() -> None:
    """see_memory_usage resets the peak after each report, so a report printed while the engine and its
    optimizer are built holds the building's peak, not a step's: DeepSpeed issue 2899's 55.83 GiB while
    ZeRO-3 creates its partitions (the report's label cut off before any step), a custom loop's bare
    `Before initializing optimizer states` / `MA 1.08 GB Max_MA 1.17 GB` (first read: those, as the run's
    peak), tptt4's ZeRO-3 initialisation; a step's own report still counts."""
    assert real("ds2899_pdsh_host_prefix_see_memory_usage.log").peak_bytes is None
    assert real("qwen2moe_custom_loop_ga8_bare_timers_tqdm.log").peak_bytes is None
    with (LOGS / "measure" / "tptt4_see_memory_usage_zero3_init.log").open("rb") as stream:
        scan = scan_stream(stream)
    assert max(r.max_ma_gb for r in scan.memory_reports) == pytest.approx(4.46)  # read (trailing space)...
    assert from_scan(scan).peak_bytes is None  # ...but all of ZeRO-3's initialisation
    m = measured_text(
        "[2025-01-01 10:00:00,000] [INFO] [utils.py:781:see_memory_usage] DeepSpeedZeRoOffload initialize [end]\n"
        "[2025-01-01 10:00:00,001] [INFO] [utils.py:782:see_memory_usage] MA 3.0 GB         Max_MA 40.0 GB         CA 41.0 GB         Max_CA 41 GB \n"
        "[2025-01-01 10:00:05,000] [INFO] [utils.py:781:see_memory_usage] Engine after backward\n"
        "[2025-01-01 10:00:05,001] [INFO] [utils.py:782:see_memory_usage] MA 4.0 GB         Max_MA 12.5 GB         CA 14.0 GB         Max_CA 14 GB \n"
    )
    assert m.peak_bytes.value == pytest.approx(12.5 * GiB)


def test_tqdm_step_time_from_its_elapsed_clock() -> None:
    """tqdm's printed rate is a moving average: it carries the slow first steps and lags a run that slows
    down. The bar's elapsed clock gives the steps (first read: ms-swift issue 8096 65.25 s, PickScore
    issue 9 17.79 s)."""
    swift = real("msswift8096_metrics_strings_tqdm.log")  # 04:17 -> 05:31 -> 06:45 -> 07:58 at the end
    assert swift.step_s.value == pytest.approx(74.0) and "elapsed clock" in swift.step_s.source
    assert real("pickscore9_accelerate_tqdm_postfix_one_line.log").step_s.value == pytest.approx(4.0)
    # another wording: 3 s steps after a 5 s first one, rates still settling, an evaluation bar between
    bars = [(1, "00:05", "5.00s/it"), (5, "00:17", "4.10s/it"), (9, "00:29", "3.52s/it")]
    after = [(10, "00:36", "3.90s/it"), (13, "00:45", "3.61s/it"), (17, "00:57", "3.33s/it")]
    lines = [f"Training:   1%|          | {n}/400 [{t}<20:00, {r}, loss=2.1]" for n, t, r in bars]
    lines.append("Evaluating: 100%|##########| 20/20 [00:04<00:00,  5.00it/s]")
    lines += [f"Training:   4%|          | {n}/400 [{t}<19:00, {r}, loss=2.0]" for n, t, r in after]
    assert measured_text("\n".join(lines) + "\n").step_s.value == pytest.approx(3.0)


def test_a_throughput_figure_names_the_line_it_was_read_from() -> None:
    """Prose quoting `CurrSamplesPerSec=...` before the log (a README, this fixture's own header) made the
    figure's source that line and its field the pre-0.6 running mean."""
    m = real("cscs_bert_squad_running_avg_readme.log")
    assert m.samples_per_s.value == pytest.approx((227.45044884073528 + 227.7217889790298) / 2)
    assert m.samples_per_s.source.startswith("log:5-9") and "CurrSamplesPerSec" in m.samples_per_s.source


def test_megatrons_iteration_time_over_deepspeeds_throughput_timer() -> None:
    """Megatron-DeepSpeed prints its wall-clock iteration time next to DeepSpeed's throughput timer,
    which leaves out the framework's work between micro-steps (first read: the ALCF run's 60.05 samples/s,
    12.8 s per 768-sample iteration, where Megatron measured 14.29 and 14.54 s)."""
    m = real("alcf_polaris_megatron_ds_running_avg_iteration.log")
    assert m.step_s.value == pytest.approx((14.2875 + 14.5414) / 2) and "Megatron" in m.step_s.source
    other = measured_text(
        "[2024-01-01 10:00:00,000] [INFO] [timer.py:260:stop] epoch=0/micro_step=20/global_step=20, "
        "RunningAvgSamplesPerSec=30.1, CurrSamplesPerSec=30.5, MemAllocated=6.01GB, MaxMemAllocated=19.52GB\n"
        "[2024-01-01 10:00:02][INFO][training:1251] -  iteration=      20/    1000 | consumed_samples=  1280 "
        "| elapsed_time_per_iteration_ms=2500.0 | global_batch_size=   64 |\n"
    )
    assert other.step_s.value == pytest.approx(2.5)
    timed = real("alcf_polaris_megatron_ds_ga8_timers.log")  # the iteration's wall clock; the timers split it
    assert "Megatron" in timed.step_s.source and "wall_clock_breakdown" in timed.compute_s.source


def test_max_allocated_as_megatron_and_llama_recipes_print_it() -> None:
    """torch.cuda.max_memory_allocated printed by other frameworks: llama-recipes' summary in whole GiB
    (first read: not at all, llama-cookbook PR 206) and Megatron's report_memory in MB = 2**20 bytes."""
    cookbook = real("llamacookbook206_tqdm_four_ranks_max_cuda_memory.log")
    assert cookbook.peak_bytes.value == 47 * GiB and cookbook.peak_kind == "max_allocated"
    megatron = measured_text(
        "[Rank 0] (after 10 iterations) memory (MB) | allocated: 6210.5 | max allocated: 30720.0 | "
        "reserved: 33000.0 | max reserved: 33000.0\n"
        "INFO - Max cuda memory allocated was 12 GB\n"
    )
    assert megatron.peak_bytes.value == 30720.0 * 2**20 and "Megatron" in megatron.peak_bytes.source


def test_ms_swifts_memory_is_a_max_reserved_peak() -> None:
    """ms-swift logs `'memory(GiB)'`, the process's torch.cuda.max_memory_reserved in GiB (first read: not
    at all, ms-swift issue 8096's 39.34): a max_reserved peak, compared with the estimate as that counter."""
    swift = real("msswift8096_metrics_strings_tqdm.log")
    assert swift.peak_bytes.value == pytest.approx(39.34 * GiB) and swift.peak_kind == "max_reserved"
    older = measured_text("{'loss': 1.52, 'acc': 0.61, 'learning_rate': 9.5e-05, 'epoch': 0.1, 'memory(GiB)': 21.8, 'train_speed(iter/s)': 0.12}\n")
    assert older.peak_bytes.value == pytest.approx(21.8 * GiB) and older.peak_kind == "max_reserved"


@pytest.mark.parametrize(
    ("name", "step_s", "samples_per_s", "peak_gib"),
    [
        # read right at first sight (manifest.yaml `truth`): kept so
        ("seekpoint_hellodeepspeed_stage1_offload_throughput.log", None, 141.28300869902063, 1.55),  # the first dropped
        ("dschat_npu_opt350m_reward_ga4_throughput.log", None, 25.73380362582048, 38.49),
        # Megatron's iteration time (16.0 s of timers in it); its CurrSamplesPerSec (75.2) is read, not used
        ("alcf_polaris_megatron_ds_ga8_timers.log", (16053.0 + 16069.2) / 2000, (74.81160215378233 + 75.522128204809) / 2, 15.59),
        ("dsprofiling_mistral7b_stage2_offload_see_memory_usage.log", None, None, 71.33),  # micro-step line only
        ("zenflow_readme_microstep_custom_step_time.log", None, None, None),
        ("madeline_gpt2_bare_microstep_custom_step_oom.log", None, None, None),
        ("transformers13616_train_metrics_mem_deltas.log", None, None, None),  # deltas are no peak
        ("megatronlm184_megatron_timers_not_deepspeed.log", None, None, None),
    ],
)
def test_real_logs_read_right_at_first_sight(name: str, step_s: float | None, samples_per_s: float | None, peak_gib: float | None) -> None:
    m = real(name)
    for figure, want, scale in ((m.step_s, step_s, 1.0), (m.samples_per_s, samples_per_s, 1.0), (m.peak_bytes, peak_gib, GiB)):
        if want is None:
            assert figure is None
        else:
            assert figure.value == pytest.approx(want * scale, rel=2e-3)


def test_a_throughput_timer_that_saw_one_micro_step_of_an_accumulated_step_is_not_its_rate(tmp_path) -> None:
    """ThroughputTimer starts at each forward and stops at each engine.step(); a framework that accumulates
    by itself and steps the engine once per batch (Megatron-DeepSpeed: `micro_step=3/global_step=3` under
    accumulation 8, 75 samples/s printed for a 16 s 256-sample step) gets the batch over one micro-step's
    time. Such a rate is dropped (refused when it was the run's only figure); one the timer counted over
    the step's micro-steps (`micro_step=40/global_step=10`, accumulation 4) is kept."""
    from zerotune.calibrate.observe import observations
    from zerotune.diagnose.analyse import Options

    def run(line: str, accum: int) -> tuple[list, list[str]]:
        log, config = tmp_path / "train.log", tmp_path / "ds.json"
        log.write_text(line + "\n")
        config.write_text(json.dumps({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": accum,
                                      "bf16": {"enabled": True}, "zero_optimization": {"stage": 1}}))  # fmt: skip
        notes: list[str] = []
        options = Options(config=str(config), model="llama3.2-1b", world_size=8, seq_len=2048)
        return observations([str(log)], None, options, load_profile("dgx-a100-80g"), notes), notes

    timer = ("[2024-04-21 02:45:40,722] [INFO] [timer.py:260:stop] epoch=0/micro_step={m}/global_step={g}, "
             "RunningAvgSamplesPerSec=74.7, CurrSamplesPerSec=74.7, MemAllocated=4.75GB, MaxMemAllocated=15.59GB")  # fmt: skip
    kept, _ = run(timer.format(m=40, g=10), accum=4)
    assert kept[0].measured.samples_per_s.value == pytest.approx(74.7)
    dropped, notes = run(timer.format(m=3, g=3), accum=8)  # the peak stays: a run of memory only
    assert dropped[0].measured.samples_per_s is None and dropped[0].measured.peak_bytes is not None
    assert any("saw 1 micro-step(s) per step" in n for n in notes)
    with pytest.raises(InputError, match="1 micro-step"):
        run(timer.format(m=3, g=3).replace(", MemAllocated=4.75GB, MaxMemAllocated=15.59GB", ""), accum=8)


# Second sight (after the fixes above): three more logs with HF's final figures.


def test_a_bar_slower_than_the_runs_mean_step_is_not_the_training_bar() -> None:
    """A generation bar after training (run_translation's eval: 222 batches at 2.44 s/it) next to the
    training bar's last update (157143 steps in 11:48:08): the median of their rates, 1.36 s, was read
    (second sight); no training step takes longer than the run's mean step (HF's train_steps_per_second,
    rounded to 3 decimals), so the figure is HF's, 0.270 s."""
    m = real("t5_translation_train_and_eval_bars.log")  # two bars: their rates refused since round 3 (below)
    assert m.step_s.value == pytest.approx(1 / 3.699) and any("start again" in n for n in m.notes)
    assert real("msswift8096_metrics_strings_tqdm.log").step_s.value == pytest.approx(74.0)  # no HF figure: the bar
    one_bar = measured_text(  # the generation bar alone, slower than the run's mean step
        "{'train_runtime': 42488.1, 'train_samples_per_second': 59.2, 'train_steps_per_second': 3.699}\n"
        "100%|##########| 222/222 [09:01<00:00,  2.44s/it]\n"
    )
    assert one_bar.step_s.value == pytest.approx(1 / 3.699) and any("generation bar" in n for n in one_bar.notes)


def test_hf_final_figures_behind_a_prefix_and_as_json() -> None:
    """`[worker :0]   train_steps_per_second   =   0.007` (a launcher's prefix: not read at second sight)
    and train_results.json's double-quoted keys."""
    assert real("tpu_fsdp_worker_prefixed_train_metrics.log").step_s.value == pytest.approx(1 / 0.007)
    assert real("baichuan13b_train_results_json_and_block.log").step_s.value == pytest.approx(1 / 0.07)  # the latest
    json_only = measured_text('{\n    "epoch": 2.0,\n    "train_runtime": 812.5,\n    "train_steps_per_second": 0.25\n}\n')
    assert json_only.step_s.value == pytest.approx(4.0)



def test_a_profiled_steps_disturbed_timers_are_no_measurement() -> None:
    """DeepSpeed's flops profiler stops the engine's timers at its profile step: the line printed then holds
    negative or zeroed timers (an ALCF Megatron-DeepSpeed run, second sight: `fwd: 0.00 | bwd: 0.00 |
    bwd_inner: -298701.19 | ... | step: 0.00` read into the timers' series). Such a line is skipped; the
    run's step is Megatron's wall clock, 63.0 s, of which the timers cover 57 s."""
    m = real("alcf_megatron_ds_profiled_step_negative_timers.log")
    assert m.step_s.value == pytest.approx(63.0369) and "Megatron" in m.step_s.source
    # medians of the 3 real steps with the first dropped
    assert m.compute_s.value == pytest.approx(((9273.33 + 9296.84) / 2 + (44919.18 + 44876.46) / 2) / 1000)
    lines = "".join(
        f"[2025-01-01 10:00:0{i},000] [INFO] [logging.py:96:log_dist] [Rank 0] time (ms) | fwd: {f} | bwd: {b} | "
        f"bwd_inner: {b} | bwd_allreduce: 0.00 | step: {o}\n"
        for i, (f, b, o) in enumerate([("100.00", "200.00", "50.00"), ("0.00", "0.00", "0.00"), ("100.00", "200.00", "50.00"), ("0.00", "0.00", "0.00")])
    )
    assert measured_text(lines).step_s.value == pytest.approx(0.35)


def test_a_job_of_another_kind_takes_the_host_costs_of_one_run_at_the_weight() -> None:
    """One run's throughput figure moves FLOP/s and DeepSpeed's host costs by their shares of its step. A
    job of the run's kind takes the fit in full; a job of another kind (here another model) takes the host
    costs at the inverse-variance weight of the fit against the profile as it was (31.3% catalog against
    33.8% carried in full: w = 0.46) and the rates in full (zerotune/model/carried.py)."""
    from zerotune.calibrate.from_log import CARRIED_IN_FULL_OTHER_JOB_ERROR_PCT
    from zerotune.catalog.trust import CATALOG_ERROR_PCT
    from zerotune.model.carried import at_weight

    base = load_profile("dgx-h100")
    small, other = _job("gpt2", 1, 512, 2), _job("llama-7b", 4, 2048, 2)
    step = predict(small, base).step_time_s / 2  # twice as fast as the profile says
    fitted = fit_logs([_job("gpt2", 1, 512, 2, Measured(step_s=Figure(step, "log:7")))], base).profile
    w = fitted.calibration.other_job_weight
    assert w == pytest.approx(CATALOG_ERROR_PCT**2 / (CATALOG_ERROR_PCT**2 + CARRIED_IN_FULL_OTHER_JOB_ERROR_PCT**2))
    assert 0.4 < w < 0.5  # both errors are of one size: about half the run's host-cost move carries
    moved = {v.path: v for v in fitted.calibration.values}
    per_step = moved["overheads.per_step_s"]
    assert per_step.calibrated < per_step.probed  # the run moved the fixed cost...
    assert predict(small, fitted).step_time_s == pytest.approx(step, rel=1e-3)  # ...and its own kind takes it all
    partial = at_weight(fitted, w)
    assert partial.overheads.per_step_s == pytest.approx(per_step.probed * (per_step.calibrated / per_step.probed) ** w)
    assert partial.compute == fitted.compute  # a rate is the hardware's: in full
    full = predict_step_on(other, fitted.model_copy(update={"calibration": fitted.calibration.model_copy(update={"other_job_weight": None})}))
    weighted, before = predict(other, fitted).step_time_s, predict(other, base).step_time_s
    assert full < weighted < before  # between the profile as it was and the fit carried in full
    assert weighted == pytest.approx(predict_step_on(other, partial.model_copy(update={"calibration": None})), rel=1e-9)
    # several runs, or a run with timers, state their own error and every job takes the fit in full
    runs = [_job("gpt2", m, 512, 2, Measured(step_s=Figure(step * m, "log:7"))) for m in (1, 2, 4)]
    assert fit_logs(runs, base).profile.calibration.other_job_weight is None


def predict_step_on(obs: Observation, profile) -> float:
    return predict(obs, profile).step_time_s


def test_a_fit_on_top_of_another_runs_fit_carries_in_full() -> None:
    """A second log calibrated on a profile already fitted on a run: the first fit's values are its prior in
    full (its weight dropped), and the two runs' fit states no weight (the evidence measured one run on a
    published profile, not a stack of them)."""
    base = load_profile("dgx-h100")
    step = predict(_job("gpt2", 1, 512, 2), base).step_time_s / 2
    first = fit_logs([_job("gpt2", 1, 512, 2, Measured(step_s=Figure(step, "log:7")))], base).profile
    assert first.calibration.other_job_weight is not None
    big = _job("llama-7b", 4, 2048, 2)
    again = fit_logs([_job("llama-7b", 4, 2048, 2, Measured(step_s=Figure(predict(big, base).step_time_s, "log:9")))], first).profile
    assert again.calibration.other_job_weight is None


# Round 3 (2026-11-28, h-fromlog3): 13 more real logs (manifest.yaml, round h-fromlog3; first sight in
# docs/commands/calibrate.md). Each test below failed before its fix, on the real log and on another wording.


@pytest.mark.parametrize(
    ("name", "step_s", "samples_per_s", "peak_gib"),
    [
        # NeoX's iteration wall clock; DeepSpeed's timer rate and peak beside it
        ("ds3742_neox_deepspeed_timers_and_neox_iteration.log", 4.1031, 8.00912418308922, 63.31),
        ("ezpz_hf_trainer_fsdp_bar_and_metrics_block.log", 2.27, None, None),  # the bar's rate (no clock window)
        ("nanogpt110_script_iter_time_ms.log", None, None, None),  # a script's own print
        ("dstutorial_comms_logger_summary_zero3.log", None, None, None),
        # second sight, after this round's fixes: another XTuner log (under DeepSpeed ZeRO-2), read right
        ("xtuner_internlm2_1_8b_deepspeed_zero2_mmengine_tail.log", None, None, 5661 / 1024),
    ],
)
def test_round3_logs_read_right_at_first_sight(name: str, step_s: float | None, samples_per_s: float | None, peak_gib: float | None) -> None:
    m = real(name)
    for figure, want, scale in ((m.step_s, step_s, 1.0), (m.samples_per_s, samples_per_s, 1.0), (m.peak_bytes, peak_gib, GiB)):
        assert (figure is None) if want is None else figure.value == pytest.approx(want * scale, rel=2e-3)


def test_iteration_time_in_seconds_and_in_nanotrons_format() -> None:
    """Megatron's iteration line in seconds (BigScience's Megatron-DeepSpeed, `elapsed time per iteration (s):
    105.22`; a patched Megatron-LM behind torchrun's prefix) and nanotron's `elapsed_time_per_iteration_ms: 41.2`
    (human_format: `1.23K` past 1000 ms): none read at first sight."""
    assert real("bigscience_tr11_176b_iteration_seconds_one_line.log").step_s.value == pytest.approx(105.22)
    assert real("jupiter_megatron_lm_iteration_seconds_prefixed.log").step_s.value == pytest.approx((5.3291 + 5.3551) / 2)
    assert real("nanotron23_iteration_ms_colon_human_format.log").step_s.value == pytest.approx((41.2 + 39.4) / 2 / 1000)
    line = "[INFO|DP=0|PP=0|TP=0]: iteration: {i} / 100 | consumed_tokens: 1M | elapsed_time_per_iteration_ms: {t} | tokens_per_sec: 9K\n"
    nanotron = measured_text("".join(line.format(i=i, t=t) for i, t in enumerate(["2.5K", "1.23K", "1.25K"])))
    assert nanotron.step_s.value == pytest.approx(1.24)
    neox = measured_text(" samples/sec: 3.1 | iteration      200/  1000 | elapsed time per iteration (s): 12.50 | lr: 1E-04 |\n")
    assert neox.step_s.value == pytest.approx(12.5)


def test_peaks_other_frameworks_print() -> None:
    """Peaks that were not read at first sight: mmengine's `memory` (XTuner; max allocated in MiB), ColossalAI's
    report_memory_usage (MiB, the rich log wrapping it), optimum-habana's `max_memory_allocated (GB)` (GiB) and
    nanotron's `cuda_max_memory_reserved: 547M` (SI, reserved)."""
    xtuner = real("xtuner_colorist_mmengine_iter_time_memory.log")
    assert xtuner.peak_bytes.value == 13969 * 2**20 and xtuner.peak_kind == "max_allocated" and xtuner.step_s is None
    assert any("dataloader iteration" in n for n in xtuner.notes)  # its time: a micro-batch under accumulation
    assert real("colossalai1400_report_memory_usage_wrapped.log").peak_bytes.value == pytest.approx(1228.89 * 2**20)
    assert real("optimum_habana731_hf_metrics_hpu_max_memory.log").peak_bytes.value == pytest.approx(73.99 * GiB)
    nanotron = real("nanotron23_iteration_ms_colon_human_format.log")
    assert nanotron.peak_bytes.value == 547e6 and nanotron.peak_kind == "max_reserved"
    epoch = measured_text(  # mmengine by epoch, and a memory that grows
        "2024/03/01 10:00:00 - mmengine - INFO - Epoch(train)  [1][ 50/625]  lr: 1.0e-04  eta: 0:10:00  time: 0.4000  data_time: 0.0100  memory: 5661  loss: 0.51\n"
        "2024/03/01 10:00:20 - mmengine - INFO - Epoch(train)  [1][100/625]  lr: 1.0e-04  eta: 0:09:40  time: 0.4100  data_time: 0.0100  memory: 6012  loss: 0.47\n"
    )
    assert epoch.peak_bytes.value == 6012 * 2**20
    wrapped = measured_text(
        "                    INFO     colossalai - colossalai - INFO: [Epoch 1 / Train]: GPU: allocated 10.5 MB,\n"
        "                             max allocated 20480.0 MB, cached: 30000.0 MB, max cached: 30000.0 MB\n"
    )
    assert wrapped.peak_bytes.value == 20480 * 2**20
    assert measured_text('{\n    "max_memory_allocated (GB)": 61.2,\n    "train_steps_per_second": 0.5\n}\n').peak_bytes.value == pytest.approx(61.2 * GiB)
    giga = measured_text("iteration: 5 / 9 | elapsed_time_per_iteration_ms: 812 | cuda_max_memory_reserved: 61.2G | hd_total_memory_tb: 312G\n")
    assert giga.peak_bytes.value == pytest.approx(61.2e9) and giga.peak_kind == "max_reserved"


def test_bars_that_start_again_without_a_clock_window_are_refused() -> None:
    """Two runs' bars in one post (finetrainers issue 111: batch 4 at 72.77 s/it, batch 1 at 21.49 s/it, one
    update each): the median of their rates, 47.13 s, was read at first sight; which bar is the job's is not in
    the log, so neither is used, with the reason."""
    two = real("finetrainers111_two_runs_two_bars.log")
    assert two.step_s is None and any("start again" in n for n in two.notes)
    train_then_eval = measured_text(
        "Training:   1%|          | 30/4000 [01:30<3:18:30,  3.00s/it, loss=2.1]\n"
        "Evaluating:  50%|#####     | 10/20 [00:02<00:02,  5.00it/s]\n"
    )
    assert train_then_eval.step_s is None


def test_logs_with_only_unread_times_are_refused_with_their_reason(tmp_path) -> None:
    """The flops profiler's summary (one profiled step under its synchronizing hooks), comms_logger's table,
    micro-step timers alone (GPT-NeoX issue 965) and mmengine's iteration time: refused, and the one-line
    error says why (at first sight: a bare "no step time, throughput or memory peak")."""
    from zerotune.calibrate.observe import observations
    from zerotune.diagnose.analyse import Options

    for name, why in (
        ("dstutorial_flops_profiler_summary_bert.log", "flops profiler"),
        ("dstutorial_comms_logger_summary_zero3.log", "log_summary"),
        ("neox965_microstep_lines_optimizer_elsewhere.log", "micro-step is not the optimizer step"),
    ):
        m = real(name)
        assert not m.has_time and m.peak_bytes is None and any(why in n for n in m.notes)
        with pytest.raises(InputError, match=why):
            observations([str(LOGS / "measure" / "real" / name)], None, Options(), load_profile("dgx-a100-80g"), [])
    short_names = measured_text("[Rank 0] time (ms) | fwd_microstep: 100.00 | bwd_microstep: 200.00 | step_microstep: 0.05\n")
    assert short_names.step_s is None and any("micro-step" in n for n in short_names.notes)
