"""Does ZeRO-3 free a module's gathered parameters after its forward when nothing is checkpointed?

    .venv/bin/python scripts/evidence/zero3_release.py        # three runs, ~20 s each, 2 gloo ranks

Three published max_allocated peaks of ZeRO-3 runs without activation checkpointing (DeepSpeedExamples
training/bf16_master_weight at 6.86B, the chenyaofo gist's stage-3 2/64 row) are the model's start of
backward with the whole 16-bit parameter set live (docs/accuracy.md, "Calibrating from a user's own run").
This replays the shape of that example's train.py block (nn.MultiheadAttention, LayerNorm, GELU MLP,
embedding and output projection; bf16, ZeRO-3, no zero.Init) on this CPU with the installed DeepSpeed,
scaled down (hidden 256, 8 layers, seq 64) with `stage3_max_reuse_distance`, `stage3_max_live_parameters`,
the prefetch and reduce buckets scaled to the same share of the model as DeepSpeed's defaults are of the
6.86B one, and prints per run the live bytes at the end of the third forward (zerotune.bench.live_memory:
every allocation and free counted) and the share of parameters still gathered then:

- checkpointed: each block recomputed in backward (torch.utils.checkpoint, non-reentrant);
- not checkpointed: the forward keeps the activations; if ZeRO-3 kept the gathered parameters too, the
  end of forward would be the whole model (16 MiB here) above the checkpointed run, not the activations;
- not checkpointed, `memory_efficient_linear: false`: torch's linear saves `weight.t()`, a view that keeps
  each gathered weight's storage alive until backward (deepspeedai/DeepSpeed#1465): the check that the
  harness sees a retained parameter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HIDDEN, LAYERS, HEADS, VOCAB, SEQ = 256, 8, 8, 4000, 64
SCALE = 1.222e6 / 1e9
"""This model's parameters (8.39M) over the 6.86B example's: DeepSpeed's 1e9-element reuse distance and live
limit, 5e7-element prefetch bucket and the example's 5e7 reduce bucket, scaled by it."""
CASES = {
    "checkpointed": (True, {}),
    "not checkpointed": (False, {}),
    "not checkpointed, memory_efficient_linear false": (False, {"memory_efficient_linear": False}),
}


def _rank(rank: int, checkpointing: bool, extra: dict, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK=str(rank))
    import deepspeed
    import torch
    from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus
    from torch import nn
    from torch.utils.checkpoint import checkpoint

    from zerotune.bench.live_memory import PhaseRecorder

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attention = nn.MultiheadAttention(HIDDEN, HEADS, batch_first=True)
            self.norm1, self.norm2 = nn.LayerNorm(HIDDEN), nn.LayerNorm(HIDDEN)
            self.ff = nn.Sequential(nn.Linear(HIDDEN, 4 * HIDDEN), nn.GELU(), nn.Linear(4 * HIDDEN, HIDDEN))

        def forward(self, x):
            attended, _ = self.attention(x, x, x)
            x = self.norm1(x + attended)
            return self.norm2(x + self.ff(x))

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embedding, self.positions = nn.Embedding(VOCAB, HIDDEN), nn.Embedding(SEQ, HIDDEN)
            self.layers = nn.ModuleList(Block() for _ in range(LAYERS))
            self.head = nn.Linear(HIDDEN, VOCAB)

        def forward(self, ids):
            x = self.embedding(ids) + self.positions(torch.arange(ids.shape[1]).unsqueeze(0))
            for layer in self.layers:
                x = checkpoint(layer, x, use_reentrant=False) if checkpointing else layer(x)
            return self.head(x)

    deepspeed.init_distributed(dist_backend="gloo")
    torch.manual_seed(0)
    recorder = PhaseRecorder(cuda=False)
    recorder.start()
    recorder.mark("init")
    model = Model()
    total = sum(p.numel() for p in model.parameters())
    zero = {
        "stage": 3,
        "overlap_comm": True,
        "contiguous_gradients": True,
        "stage3_param_persistence_threshold": 0,
        "stage3_max_reuse_distance": int(1e9 * SCALE),
        "stage3_max_live_parameters": int(1e9 * SCALE),
        "stage3_prefetch_bucket_size": int(5e7 * SCALE),
        "reduce_bucket_size": int(5e7 * SCALE),
        **extra,
    }
    config = {
        "train_micro_batch_size_per_gpu": 1,
        "bf16": {"enabled": True},
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
        "zero_optimization": zero,
    }
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    loss_fn = nn.CrossEntropyLoss()
    gathered = 0
    for step in range(3):  # the coordinator's trace is complete from the second step on
        ids, labels = torch.randint(0, VOCAB, (1, SEQ)), torch.randint(0, VOCAB, (1, SEQ))
        recorder.mark(f"forward{step}")
        loss = loss_fn(engine(ids).view(-1, VOCAB), labels.view(-1))
        gathered = sum(p.ds_numel for p in engine.module.parameters() if p.ds_status != ZeroParamStatus.NOT_AVAILABLE)
        recorder.mark(f"backward{step}")
        loss.backward()
        recorder.mark(f"step{step}")
        engine.step()
    recorder.mark("end")
    rows = {r["phase"]: r for r in recorder.phases()}
    if rank == 0:
        Path(out).write_text(json.dumps({"forward_end": rows["forward2"]["end"], "gathered": gathered / total}))


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--rank":
        _, _, rank, case, port, out = sys.argv
        checkpointing, extra = CASES[case]
        _rank(int(rank), checkpointing, extra, int(port), out)
        return 0
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "PYTHONPATH": str(REPO)}
    results = {}
    for i, case in enumerate(CASES):
        out = f"/tmp/zerotune_zero3_release_{os.getpid()}_{i}.json"
        procs = [
            subprocess.Popen(
                [sys.executable, __file__, "--rank", str(r), case, str(29611 + i), out],
                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )
            for r in range(2)
        ]
        if any(p.wait() for p in procs):
            print(f"{case}: a rank failed (rerun with the ranks' output to see why)")
            return 1
        results[case] = json.loads(Path(out).read_text())
        Path(out).unlink()
    base = results["checkpointed"]["forward_end"]
    print("live bytes at the end of the third forward (rank 0), and the parameters still gathered then")
    for case, r in results.items():
        print(f"  {case:50s} {r['forward_end'] / 2**20:7.2f} MiB ({(r['forward_end'] - base) / 2**20:+6.2f}), "
              f"gathered {r['gathered']:.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
