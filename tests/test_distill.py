"""--distill-from: BAM!'s target mixing and teacher annealing, and a tiny run taught by a tiny
separate run."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from palkit.trainer.config import TrainConfig
from palkit.trainer.distill import DistillError, distill_loss, teacher_weight
from palkit.trainer.model import regression_score
from palkit.trainer.tasks import resolve_tasks
from palkit.trainer.train import train
from testing_utils import tiny_config

SST, QUORA, STS = resolve_tasks(["sst", "quora", "sts"], [])


def test_teacher_weight_falls_linearly_from_one_to_zero():
    assert [teacher_weight(s, 5) for s in range(5)] == [1.0, 0.75, 0.5, 0.25, 0.0]
    assert teacher_weight(0, 1) == 1.0          # a one-step phase is all teacher


def test_classification_loss_mixes_teacher_probabilities_and_gold():
    torch.manual_seed(0)
    raw, teacher = torch.randn(6, 5), torch.randn(6, 5)
    gold = torch.tensor([0, 1, 2, 3, 4, 0], dtype=torch.float32)
    to_teacher = -(teacher.softmax(-1) * raw.log_softmax(-1)).sum(-1).mean()
    to_gold = F.cross_entropy(raw, gold.long())
    assert distill_loss(SST, raw, gold, teacher, 1.0, "mse") == pytest.approx(to_teacher.item())
    assert distill_loss(SST, raw, gold, teacher, 0.0, "mse") == pytest.approx(to_gold.item())
    mid = distill_loss(SST, raw, gold, teacher, 0.25, "mse")
    assert mid == pytest.approx(0.25 * to_teacher.item() + 0.75 * to_gold.item())


def test_regression_target_mixes_teacher_score_and_gold():
    raw = torch.tensor([[0.0], [1.0]], requires_grad=True)
    teacher = torch.tensor([[2.0], [-1.0]])
    gold = torch.tensor([1.0, 4.0])
    student = regression_score(STS, raw)
    teacher_score = regression_score(STS, teacher)
    for w in (1.0, 0.5, 0.0):
        expected = ((student - (w * teacher_score + (1 - w) * gold)) ** 2).mean()
        assert distill_loss(STS, raw, gold, teacher, w, "mse").item() == \
            pytest.approx(expected.item())
    # Same gradient as the w-mixture of the two squared errors (they differ by a constant).
    w = 0.3
    (g_mixed,) = torch.autograd.grad(distill_loss(STS, raw, gold, teacher, w, "mse"), raw)
    mixture = (w * F.mse_loss(regression_score(STS, raw), teacher_score)
               + (1 - w) * F.mse_loss(regression_score(STS, raw), gold))
    (g_mixture,) = torch.autograd.grad(mixture, raw)
    assert torch.allclose(g_mixed, g_mixture)
    # bce: the target is the teacher's probability mixed with the gold score scaled to [0, 1].
    loss = distill_loss(STS, raw, gold, teacher, 0.5, "bce")
    target = 0.5 * torch.sigmoid(teacher.squeeze(-1)) + 0.5 * gold / 5
    assert loss.item() == pytest.approx(
        F.binary_cross_entropy_with_logits(raw.squeeze(-1), target).item())


@pytest.fixture(scope="module")
def tiny_teachers(tmp_path_factory, tiny_bert: Path, tiny_data: Path) -> Path:
    out = tmp_path_factory.mktemp("teachers") / "separate"
    return train(tiny_config(tiny_bert, tiny_data, out, mode="separate", epochs=1,
                             steps_per_epoch=3))


def test_distilled_run_anneals_the_teacher_over_the_joint_phase(tmp_path, tiny_bert, tiny_data,
                                                               tiny_teachers, monkeypatch):
    import palkit.trainer.train as tt
    seen: list[tuple[str, float]] = []
    real = tt.distill_loss

    def recording(spec, raw, labels, teacher_raw, weight, sts_loss):
        seen.append((spec.name, weight))
        return real(spec, raw, labels, teacher_raw, weight, sts_loss)

    monkeypatch.setattr(tt, "distill_loss", recording)
    run = train(tiny_config(tiny_bert, tiny_data, tmp_path / "bam", distill_from=str(tiny_teachers),
                            tune_adapters_after=1))
    total = 2 * 4                                  # joint phase: 2 epochs of 4 steps
    assert [w for _, w in seen] == [1 - s / (total - 1) for s in range(total)]
    assert seen[0][1] == 1.0 and seen[-1][1] == 0.0
    assert {t for t, _ in seen} <= {"sst", "quora", "sts"}
    # The tuning phases train on gold labels only (no teacher calls past the joint phase).
    phases = [json.loads(x)["phase"] for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert phases == ["joint", "joint", "tune:sst", "tune:quora", "tune:sts"]
    config = json.loads((run / "config.json").read_text())
    assert config["distill_from"] == str(tiny_teachers)


def test_teachers_change_what_is_learned(tmp_path, tiny_bert, tiny_data, tiny_teachers):
    plain = train(tiny_config(tiny_bert, tiny_data, tmp_path / "plain", epochs=1))
    taught = train(tiny_config(tiny_bert, tiny_data, tmp_path / "taught", epochs=1,
                               distill_from=str(tiny_teachers)))
    loss = [json.loads((r / "metrics.jsonl").read_text().splitlines()[0])["train_loss"]
            for r in (plain, taught)]
    assert loss[0] != loss[1]


def test_distilling_from_a_run_that_is_not_separate_is_one_line(tmp_path, tiny_bert, tiny_data,
                                                                tiny_pal_run):
    with pytest.raises(DistillError) as e:
        train(tiny_config(tiny_bert, tiny_data, tmp_path / "x", distill_from=str(tiny_pal_run)))
    assert "not a --mode separate run" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(DistillError, match="no separate model for task 'cfimdb'"):
        teachers = tmp_path / "only-sst"
        train(tiny_config(tiny_bert, tiny_data, teachers, mode="separate", tasks=("sst",),
                          epochs=1, steps_per_epoch=1))
        train(tiny_config(tiny_bert, tiny_data, tmp_path / "y", tasks=("sst", "cfimdb"),
                          distill_from=str(teachers)))
    with pytest.raises(ValueError, match="distill_from trains a joint model"):
        TrainConfig(mode="separate", distill_from="runs/separate")
