"""Master weights, the optimizer's gradient copy and its moments, as a real DeepSpeed 0.19.8 engine
builds them, against `state_bytes` (zerotune/model/memory.py).

One CPU process (gloo, world size 1) initialises ZeRO stages 1-3 over a two-layer model with fp32
and with `bf16_master_weights_and_grads` + `bf16_optimizer_states`, takes one step, and reports per
case: the master partition's dtype, whether it is the parameter partition itself or a separate
tensor, and the dtype of the moments the optimizer created. The bytes `state_bytes` counts must
follow: a separate master at every stage 1-3 (stage 3's same-dtype reuse never happens in 0.19.8),
master and gradient copy in the master dtype, moments like the master on the GPU path.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from zerotune.dsconfig.settings import resolve
from zerotune.model.states import state_bytes
from zerotune.units import DTYPE_BYTES

pytestmark = pytest.mark.slow

BF16_MASTER = {"enabled": True, "bf16_master_weights_and_grads": True, "bf16_optimizer_states": True}

ENGINE = textwrap.dedent(
    """
    import json, os, socket, sys
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(DS_ACCELERATOR="cpu", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0",
                      WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_SIZE="1")
    import torch, deepspeed, deepspeed.ops
    # as the bench ranks do: no JIT build of DeepSpeed's shared-memory all-reduce (a minute of
    # compiling on every fresh checkout; one process has nothing to all-reduce with)
    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    deepspeed.init_distributed(dist_backend="gloo")
    out = []
    for stage, bf16 in json.loads(sys.argv[1]):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 8))
        config = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": stage}}
        if bf16:
            config["bf16"] = bf16
        engine, *_ = deepspeed.initialize(
            model=model, optimizer=torch.optim.AdamW(model.parameters(), lr=1e-3), config=config)
        x = torch.randn(2, 64, dtype=torch.bfloat16 if bf16 else torch.float32)
        engine.backward(engine(x).float().sum())
        engine.step()
        zo = engine.optimizer
        if stage == 3:
            master, working = zo.fp32_partitioned_groups_flat[0], zo.fp16_partitioned_groups_flat[0]
        else:
            master, working = zo.single_partition_of_fp32_groups[0], zo.bit16_groups_flat[0]
        moments = [v for v in zo.optimizer.state[master].values() if torch.is_tensor(v) and v.numel() > 1]
        out.append({"stage": stage, "bf16": bool(bf16), "master": str(master.dtype).split(".")[1],
                    "separate": master.data_ptr() != working.data_ptr(),
                    "moments": sorted({str(v.dtype).split(".")[1] for v in moments})})
    print("RESULT " + json.dumps(out))
    """
)
TORCH_DTYPES = {"float32": "fp32", "bfloat16": "bf16"}


@pytest.fixture(scope="module")
def engines() -> list[dict]:
    pytest.importorskip("deepspeed")
    cases = [[stage, bf16] for stage in (1, 2, 3) for bf16 in (None, BF16_MASTER)]
    done = subprocess.run(
        [sys.executable, "-c", ENGINE, json.dumps(cases)], capture_output=True, text=True, timeout=300
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-2000:]
    return json.loads(lines[-1].removeprefix("RESULT "))


def test_engine_cases_ran(engines: list[dict]) -> None:
    assert [(e["stage"], e["bf16"]) for e in engines] == [(s, b) for s in (1, 2, 3) for b in (False, True)]


def test_every_stage_keeps_a_separate_master(engines: list[dict]) -> None:
    for e in engines:
        assert e["separate"], e
        precision = "bf16" if e["bf16"] else "fp32"
        master_dtype = resolve({"bf16": BF16_MASTER} if e["bf16"] else {}).zero.master_dtype
        sb = state_bytes(
            precision, "adamw", e["stage"], master_dtype=master_dtype, states_16bit=bool(e["bf16"])
        )
        assert sb.master == DTYPE_BYTES[TORCH_DTYPES[e["master"]]], e


def test_moments_follow_the_master_dtype(engines: list[dict]) -> None:
    for e in engines:
        (dtype,) = e["moments"]
        assert dtype == e["master"], e
        precision = "bf16" if e["bf16"] else "fp32"
        sb = state_bytes(precision, "adamw", e["stage"], master_dtype=precision, states_16bit=e["bf16"])
        assert sb.moments == 2 * DTYPE_BYTES[TORCH_DTYPES[dtype]], e


def test_resolve_reads_the_flags() -> None:
    z = resolve({"bf16": BF16_MASTER}).zero
    assert (z.master_dtype, z.optimizer_states_16bit) == ("bf16", True)
    z = resolve({"bf16": {"enabled": True, "bf16_master_weights_and_grads": True}}).zero
    assert (z.master_dtype, z.optimizer_states_16bit) == ("bf16", False)
    # bf16_optimizer_states alone is rejected by DeepSpeed's parse; it changes nothing here
    assert resolve({"bf16": {"enabled": True, "bf16_optimizer_states": True}}).zero.master_dtype == "fp32"
    assert (
        resolve({"fp16": {"enabled": True, "fp16_master_weights_and_grads": True}}).zero.master_dtype
        == "fp16"
    )
    assert resolve({"bf16": {"enabled": True}}).zero.master_dtype == "fp32"


def test_sixteen_bit_master_shrinks_k_from_12_to_6() -> None:
    # GPU path: master 2 + moments 2 x 2 (the optimizer creates them like the master); the gradient
    # copy 2 B instead of 4. Under CPU offload DeepSpeed's CPU Adam keeps fp32 moments unless
    # bf16_optimizer_states.
    assert state_bytes("bf16", "adamw", 3).k == 12
    sb = state_bytes("bf16", "adamw", 3, master_dtype="bf16")
    assert (sb.k, sb.grad_fp32) == (6, 2)
    assert state_bytes("bf16", "adamw", 2, offload=True, master_dtype="bf16").k == 2 + 8
    assert state_bytes("bf16", "adamw", 2, offload=True, master_dtype="bf16", states_16bit=True).k == 2 + 4


def test_state_saving_matches_deepspeeds_bf16_master_example() -> None:
    """DeepSpeedExamples training/bf16_master_weight/README.md, 4xH100, ZeRO-3, the 6.9B model of its
    train.py: allocated memory 25.74 GB with fp32 master weights, 16.17 GB with bf16 master weights and
    optimizer states (GiB, as train.py prints them). The model states are all that changes, so the
    difference is 2 B (master) + 4 B (moments) per element of a rank's partition."""
    from pathlib import Path

    from zerotune.catalog.models import load_model
    from zerotune.dsconfig.settings import ZeroSettings
    from zerotune.model.memory import estimate_memory
    from zerotune.schema.workload import Workload

    spec = load_model(
        str(Path(__file__).parents[2] / "data/published/models/ds-example-transformer-6.9b.yaml")
    )
    work = Workload(
        seq_len=512, micro_batch=1, precision="bf16", activation_checkpointing=True, gpus_per_node=4
    )
    base = ZeroSettings(
        stage=3, overlap_comm=True, reduce_bucket_size=50_000_000, param_persistence_threshold=0
    )
    low = base.model_copy(update={"master_dtype": "bf16", "optimizer_states_16bit": True})
    saved = (
        estimate_memory(spec, work, base).per_gpu.optimizer_states
        - estimate_memory(spec, work, low).per_gpu.optimizer_states
    )
    assert saved / 2**30 == pytest.approx(25.74 - 16.17, rel=0.01)


def test_memory_notes_say_what_the_flags_changed() -> None:
    from zerotune.catalog.models import load_model
    from zerotune.dsconfig.settings import ZeroSettings
    from zerotune.model.memory import estimate_memory
    from zerotune.schema.workload import Workload

    zero = resolve({"bf16": BF16_MASTER, "zero_optimization": {"stage": 3}}).zero
    notes = estimate_memory(load_model("llama-7b"), Workload(gpus_per_node=8), zero).notes
    assert any("6 B of optimizer state per parameter instead of 12" in n for n in notes), notes
    plain = estimate_memory(load_model("llama-7b"), Workload(gpus_per_node=8), ZeroSettings(stage=3)).notes
    assert not any("master_weights" in n for n in plain)
