"""Command-line options that more than one command takes, defined once so they read the same."""

from __future__ import annotations

from typing import Annotated

import typer

CheckpointInCpu = Annotated[
    bool,
    typer.Option(
        "--checkpoint-in-cpu",
        help="The checkpoints wait for backward in host memory (DeepSpeed cpu_checkpointing, "
        "Megatron-DeepSpeed --checkpoint-in-cpu).",
    ),
]
