"""nmt/analysis/attention_stats.py: the mean attention entropy and its ratio to the uniform distribution's."""

from __future__ import annotations

import math

import pytest
import torch

from nmt.analysis.attention_stats import attention_entropy, row_entropy


def test_attention_entropy_values() -> None:
    uniform = torch.full((3, 4), 0.25)
    entropy, ratio = attention_entropy(uniform)
    assert entropy == pytest.approx(torch.log(torch.tensor(4.0)).item())
    assert ratio == pytest.approx(1.0)
    one_hot = torch.eye(4)[:3]
    entropy, ratio = attention_entropy(one_hot)
    assert entropy == pytest.approx(0.0, abs=1e-9)
    assert ratio == pytest.approx(0.0, abs=1e-9)


def test_attention_entropy_keeps_its_values() -> None:
    # the formula `nmt experiment` reported before row_entropy was shared with attention-scaling, bit for bit
    weights = torch.softmax(torch.randn(7, 9, generator=torch.Generator().manual_seed(0)) * 30, dim=-1)
    rows = weights.double().clamp_min(1e-12)
    entropy = -(rows * rows.log()).sum(dim=-1)
    assert attention_entropy(weights) == (float(entropy.mean()), float(entropy.mean() / math.log(9)))
    assert attention_entropy(torch.ones(3, 1)) == (0.0, 0.0)  # one source position: ratio 0, not 0/0


def test_attention_scaling_measures_entropy_by_the_same_rule() -> None:
    from nmt.analysis.attention_scaling import step_statistics

    # row 0: saturated, its small weights under the floor; row 1: one real position; padding at 99
    scores = torch.tensor([[0.0, 40.0, -40.0, 3.0, 99.0], [5.0, 99.0, 99.0, 99.0, 99.0]], dtype=torch.float64)
    mask = torch.tensor([[True, True, True, True, False], [True, False, False, False, False]])
    ratio = step_statistics(scores, scores, mask, torch.tensor([True, True]))["entropy_ratio"]
    alone = torch.softmax(scores[0, :4], dim=-1).unsqueeze(0)  # the same row without its padding
    assert ratio[0].item() == pytest.approx(attention_entropy(alone)[1], rel=1e-12, abs=0)
    assert ratio[1].item() == 0.0
    padded = torch.softmax(scores.masked_fill(~mask, -math.inf), dim=-1)
    assert row_entropy(padded, mask)[0].item() == pytest.approx(attention_entropy(alone)[0], rel=1e-12, abs=0)
