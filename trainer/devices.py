"""Where a run trains: its device, and under torchrun its rank among the processes."""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from palkit.core.errors import ConfigError
from palkit.trainer.config import TrainConfig


@dataclass(frozen=True)
class Dist:
    rank: int
    world: int
    device: torch.device

    @property
    def main(self) -> bool:
        return self.rank == 0


def setup_distributed(cfg: TrainConfig) -> Dist:
    """torchrun sets WORLD_SIZE/RANK/LOCAL_RANK; without it this is one process."""
    want_cuda = cfg.device == "cuda" or (cfg.device == "auto" and torch.cuda.is_available())
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda was asked for but no CUDA device is visible")
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", local) if want_cuda else torch.device("cpu")
    if want_cuda:
        torch.cuda.set_device(device)
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if want_cuda else "gloo")
    return Dist(rank, world, device)


def loss_sync_interval(device: torch.device) -> int:
    """Steps between reads of the loss to the host. A read waits for the GPU to finish, so there
    losses are read in blocks; on a CPU it costs nothing, so every step."""
    return 1 if device.type == "cpu" else 50
