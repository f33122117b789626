"""Task sampling schedules (paper section 4.1), gradient surgery and the metrics."""
from __future__ import annotations

import pytest
import torch

from palkit.trainer.metrics import average_score, binary_f1, pearson, spearman, task_metrics
from palkit.trainer.sampling import (TaskStream, epoch_task_schedule, sampling_alpha,
                                     task_probabilities)
from palkit.trainer.surgery import GradVac, pcgrad
from palkit.trainer.tasks import BUILTIN_TASKS


def test_annealed_alpha_goes_from_one_to_point_two():
    assert sampling_alpha("annealed", 1, 10) == 1.0
    assert sampling_alpha("annealed", 10, 10) == pytest.approx(0.2)
    assert sampling_alpha("annealed", 4, 7) == pytest.approx(1 - 0.8 * 3 / 6)
    assert sampling_alpha("sqrt", 3, 10) == 0.5 and sampling_alpha("proportional", 3, 10) == 1.0


def test_probabilities_follow_size_power():
    sizes = [8544, 16214, 6040]
    assert task_probabilities(sizes, 1.0) == pytest.approx([n / sum(sizes) for n in sizes])
    roots = [n ** 0.5 for n in sizes]
    assert task_probabilities(sizes, 0.5) == pytest.approx([r / sum(roots) for r in roots])
    assert task_probabilities(sizes, None) == pytest.approx([1 / 3] * 3)


def test_schedules_are_reproducible_and_follow_probabilities():
    sizes = [100, 900]
    a = epoch_task_schedule("proportional", sizes, 1, 5, 4000, seed=3)
    assert a == epoch_task_schedule("proportional", sizes, 1, 5, 4000, seed=3)
    assert a != epoch_task_schedule("proportional", sizes, 2, 5, 4000, seed=3)
    assert 0.86 < sum(a) / len(a) < 0.94
    assert epoch_task_schedule("round-robin", [5, 5, 5], 1, 1, 6, 0) == [0, 1, 2, 0, 1, 2]


def test_task_stream_covers_every_example_each_pass_and_resumes():
    stream = TaskStream(10, seed=1, task_index=0)
    first, second = stream.take(10), stream.take(10)
    assert sorted(first) == list(range(10)) and sorted(second) == list(range(10))
    assert first != second
    resumed = TaskStream(10, seed=1, task_index=0, drawn=7)
    assert resumed.take(5) == (first + second)[7:12]


def test_pcgrad_removes_the_conflicting_component():
    g1, g2 = torch.tensor([1.0, 0.0]), torch.tensor([-1.0, 1.0])
    out = pcgrad([g1, g2], torch.Generator().manual_seed(0))
    # g1 projected off g2: [0.5, 0.5]; g2 projected off g1: [0, 1].
    assert torch.allclose(out, torch.tensor([0.5, 1.5]))
    same = pcgrad([g1, g1], torch.Generator().manual_seed(0))
    assert torch.allclose(same, 2 * g1)


def test_gradvac_raises_cosine_towards_its_target():
    vac = GradVac(2, beta=1.0)
    g1, g2 = torch.tensor([1.0, 0.2]), torch.tensor([-1.0, 1.0])
    vac([g1, g2], torch.Generator().manual_seed(0))     # targets become the observed cosines
    vac.targets.fill_(0.5)
    out = vac([g1, g2], torch.Generator().manual_seed(0))
    assert torch.isfinite(out).all()
    assert not torch.allclose(out, g1 + g2)


def test_metrics_on_known_values():
    x = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert pearson(x, 2 * x + 1) == pytest.approx(1.0)
    assert pearson(x, -x) == pytest.approx(-1.0)
    assert spearman(x, x ** 3) == pytest.approx(1.0)
    assert spearman(torch.tensor([1.0, 2.0, 2.0, 3.0]), torch.tensor([1.0, 2.0, 3.0, 4.0])) \
        == pytest.approx(0.9486832980505138)   # textbook tie-corrected value
    assert binary_f1(torch.tensor([1, 1, 0, 0]), torch.tensor([1, 0, 1, 0])) == pytest.approx(0.5)


def test_average_is_mean_of_accuracies_and_scaled_pearson():
    specs = [BUILTIN_TASKS["sst"], BUILTIN_TASKS["quora"], BUILTIN_TASKS["sts"]]
    metrics = {"sst_acc": 0.5, "quora_acc": 0.8, "sts_pearson": 0.6}
    assert average_score(specs, metrics) == pytest.approx((0.5 + 0.8 + 0.8) / 3)
    m = task_metrics(BUILTIN_TASKS["quora"], torch.tensor([1.0, 0.0]), torch.tensor([1.0, 1.0]))
    assert m == {"quora_acc": 0.5, "quora_f1": pytest.approx(2 / 3)}
