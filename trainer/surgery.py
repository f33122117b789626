"""Gradient surgery on the shared (trunk) parameters: PCGrad and GradVac.

Each takes one flattened gradient per task and returns their combined, de-conflicted sum.
Task-specific parameters (PALs, heads) never conflict and are not touched.
"""
from __future__ import annotations

import torch


def pcgrad(grads: list[torch.Tensor], generator: torch.Generator) -> torch.Tensor:
    """Yu et al. 2020: project each task's gradient off every other one it conflicts with."""
    out = []
    for i, g in enumerate(grads):
        g = g.clone()
        others = [j for j in torch.randperm(len(grads), generator=generator).tolist() if j != i]
        for j in others:
            dot = g @ grads[j]
            if dot < 0:
                g -= dot / (grads[j] @ grads[j]).clamp_min(1e-20) * grads[j]
        out.append(g)
    return torch.stack(out).sum(0)


class GradVac:
    """Wang et al. 2020 (Luo report, eq. 6): pull each pair's cosine up to its running target."""

    def __init__(self, num_tasks: int, beta: float = 0.01):
        self.beta = beta
        self.targets = torch.zeros(num_tasks, num_tasks, dtype=torch.float64)

    def __call__(self, grads: list[torch.Tensor], generator: torch.Generator) -> torch.Tensor:
        out = []
        for i, g in enumerate(grads):
            g = g.clone()
            others = [j for j in torch.randperm(len(grads), generator=generator).tolist() if j != i]
            for j in others:
                gj = grads[j]
                norm_g, norm_j = g.norm(), gj.norm()
                if norm_g == 0 or norm_j == 0:
                    continue
                phi = float(g @ gj / (norm_g * norm_j))
                target = float(self.targets[i, j])
                if phi < target:
                    coef = (norm_g * (target * (1 - phi ** 2) ** 0.5 - phi * (1 - target ** 2) ** 0.5)
                            / (norm_j * (1 - target ** 2) ** 0.5))
                    g = g + coef * gj
                self.targets[i, j] = (1 - self.beta) * target + self.beta * phi
            out.append(g)
        return torch.stack(out).sum(0)
