"""The training job a recommendation or prediction is for."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Precision = Literal["bf16", "fp16", "fp32"]
Optimizer = Literal["adamw", "adam", "sgd", "lion", "adagrad"]


class Workload(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    seq_len: int = Field(2048, gt=0)
    micro_batch: int = Field(1, gt=0, description="sequences per GPU per forward")
    grad_accum: int = Field(1, gt=0)
    precision: Precision = "bf16"
    optimizer: Optimizer = "adamw"
    activation_checkpointing: bool = True
    gpus_per_node: int = Field(8, gt=0, description="ranks per node (gloo ranks on a CPU host)")
    nodes: int = Field(1, gt=0)

    @property
    def world_size(self) -> int:
        return self.gpus_per_node * self.nodes

    @property
    def tokens_per_step(self) -> int:
        return self.seq_len * self.micro_batch * self.grad_accum * self.world_size
