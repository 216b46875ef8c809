"""nmt/decoding/attention_stats.py: the mean attention entropy and its ratio to the uniform distribution's."""

from __future__ import annotations

import pytest
import torch

from nmt.decoding.attention_stats import attention_entropy


def test_attention_entropy_values() -> None:
    uniform = torch.full((3, 4), 0.25)
    entropy, ratio = attention_entropy(uniform)
    assert entropy == pytest.approx(torch.log(torch.tensor(4.0)).item())
    assert ratio == pytest.approx(1.0)
    one_hot = torch.eye(4)[:3]
    entropy, ratio = attention_entropy(one_hot)
    assert entropy == pytest.approx(0.0, abs=1e-9)
    assert ratio == pytest.approx(0.0, abs=1e-9)
