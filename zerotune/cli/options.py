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

AdHocParams = Annotated[
    float | None, typer.Option("--params", help="Ad-hoc model with this many parameters (e.g. 7.5e9).")
]
AdHocLayers = Annotated[int | None, typer.Option("--layers", help="Ad-hoc model: transformer blocks.")]
AdHocHidden = Annotated[int | None, typer.Option("--hidden", help="Ad-hoc model: hidden size.")]

Distributed = Annotated[
    bool,
    typer.Option("--distributed", help="Run as one rank under torchrun (every rank runs this); rank 0 reports."),
]
Fault = Annotated[str | None, typer.Option("--fault", hidden=True, help="Test only: JSON fault injection.")]
