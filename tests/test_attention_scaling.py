"""`nmt attention-scaling`: the sqrt(d) fact at initialisation, the per-step statistics, the recorder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from nmt.analysis.attention_scaling import attention_statistics, step_statistics
from nmt.compare.attention_scaling import scaling_statistics
from nmt.config import ModelConfig
from nmt.errors import NMTError
from nmt.models import build_model
from nmt.models.rnn.attention import DotAttention
from nmt.training import trainer
from nmt.training.trainer import train
from tests.helpers import fake_run, reverse_task_config

TINY = {"embedding_size": 16, "hidden_size": 16, "maxout_size": 8}


@pytest.mark.parametrize("d", [16, 128, 1024])
def test_unscaled_score_variance_grows_with_d_and_scaled_stays_near_one(d: int) -> None:
    # the explainer's premise: query and key components of mean 0 and variance 1
    gen = torch.Generator().manual_seed(d)
    query, keys = torch.randn(512, d, generator=gen), torch.randn(512, 20, d, generator=gen)
    unscaled = DotAttention(4, 4, d, scaled=False).scores(query, keys)  # 512 x 20
    scaled = DotAttention(4, 4, d, scaled=True).scores(query, keys)
    assert unscaled.var().item() == pytest.approx(d, rel=0.1)
    assert scaled.var().item() == pytest.approx(1.0, rel=0.1)


def test_step_statistics_values() -> None:
    mask = torch.tensor([[True, True, True, True], [True, True, False, False]])
    scores = torch.tensor([[0.0, 0.0, 0.0, 0.0], [10.0, -10.0, 99.0, 99.0]])  # padded 99s must not count
    grads = torch.tensor([[3.0, 4.0, 0.0, 0.0], [1.0, 0.0, 7.0, 7.0]])
    stats = step_statistics(scores, grads, mask, torch.tensor([True, True]))
    assert stats["score_variance"].tolist() == pytest.approx([0.0, 100.0])
    assert stats["max_weight"].tolist() == pytest.approx([0.25, 1.0], abs=1e-8)
    assert stats["saturated_share"].tolist() == [0.0, 1.0]
    assert stats["entropy_ratio"].tolist() == pytest.approx([1.0, 0.0], abs=1e-7)
    assert stats["score_grad_norm"].tolist() == pytest.approx([5.0, 1.0])
    only_first = step_statistics(scores, grads, mask, torch.tensor([True, False]))
    assert only_first["max_weight"].tolist() == pytest.approx([0.25])


def _pairs(n: int, seed: int) -> list[tuple[list[int], list[int]]]:
    gen = torch.Generator().manual_seed(seed)
    pairs = []
    for _ in range(n):
        length = int(torch.randint(3, 9, (1,), generator=gen))
        source = torch.randint(4, 20, (length,), generator=gen).tolist()
        pairs.append((source, source[::-1]))
    return pairs


def test_large_scores_saturate_the_softmax_and_flatten_the_gradient() -> None:
    torch.manual_seed(0)
    model = build_model(ModelConfig(attention="dot", attention_size=64, **TINY), 20, 20)
    pairs = _pairs(40, seed=1)
    before = attention_statistics(model, pairs)["attention"]
    with torch.no_grad():  # keys 100x larger: the first step's scores 100x, variance 10^4 x (later steps'
        model.decoder.provider.key_proj.weight.mul_(100.0)  # queries change with the contexts read)
    after = attention_statistics(model, pairs)["attention"]
    assert 5e3 * before.score_variance < after.score_variance < 2e4 * before.score_variance
    assert before.saturated_share < 0.05 < 0.5 < after.saturated_share
    assert after.entropy_ratio < 0.3 < 0.9 < before.entropy_ratio
    assert after.score_grad_norm < before.score_grad_norm
    assert before.steps == after.steps == sum(len(t) + 1 for _, t in pairs)


def test_the_recorded_scores_are_the_ones_the_model_attends_with() -> None:
    torch.manual_seed(0)
    model = build_model(ModelConfig(attention="scaled_dot", attention_size=8, **TINY), 20, 20).eval()
    pairs = _pairs(5, seed=2)
    stats = attention_statistics(model, pairs)["attention"]
    from nmt.data.batching import make_batch

    batch = make_batch([s for s, _ in pairs], [t for _, t in pairs], list(range(5)))
    with torch.no_grad():
        _, weights = model(batch.src, batch.src_lengths, batch.tgt_in, return_attention=True)  # b x tgt x src
    real = batch.tgt_out != 0
    assert stats.max_weight == pytest.approx(weights.max(dim=-1).values[real].double().mean().item(), rel=1e-5)
    assert all(p.grad is None for p in model.parameters())  # measuring leaves no gradients behind


def test_a_negative_sample_size_is_refused_in_curve_s_words(tmp_path: Path) -> None:
    import argparse

    from nmt.commands import attention_scaling as command

    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    with pytest.raises(NMTError, match="--sentences-per-bucket -1: it must be >= 0") as error:
        command.run(parser.parse_args([str(tmp_path), "--sentences-per-bucket", "-1"]))
    assert error.value.hint == "Give a count, or 0 for every sentence."


def test_a_missing_folder_is_said_not_to_exist_and_an_experiment_points_to_its_runs(tmp_path: Path) -> None:
    import argparse

    from nmt.commands import attention_scaling as command

    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    with pytest.raises(NMTError, match=r"missing does not exist\."):
        command.run(parser.parse_args([str(tmp_path / "missing")]))
    fake_run(tmp_path / "exp" / "runs" / "dot-128")
    with pytest.raises(NMTError, match=r"exp is an experiment's folder, not a training run") as error:
        command.run(parser.parse_args([str(tmp_path / "exp")]))
    assert error.value.hint == f"Pass its runs, {tmp_path / 'exp'}/runs/NAME (dot-128)."


def test_a_run_without_attention_is_refused() -> None:
    model = build_model(ModelConfig(attention="none", **TINY), 20, 20)
    with pytest.raises(NMTError, match="attention: none"):
        attention_statistics(model, _pairs(2, seed=3))


@pytest.mark.parametrize("scaled", [True, False])
def test_a_transformer_is_measured_per_layer_and_head_with_and_without_sqrt_dk(scaled: bool) -> None:
    torch.manual_seed(0)
    config = ModelConfig(architecture="transformer", embedding_size=64, hidden_size=64, heads=2, layers=2,
                         feedforward_size=32, scaled_attention=scaled)
    model = build_model(config, 20, 20)
    pairs = _pairs(20, seed=4)
    stats = attention_statistics(model, pairs)
    heads = [f"layer {layer} head {head}" for layer in (1, 2) for head in (1, 2)]
    assert set(stats) == {"attention", "layer 1", "layer 2", *heads}
    steps = sum(len(t) + 1 for _, t in pairs)  # each head of each layer: one row per target step
    assert {name: s.steps for name, s in stats.items()} == {
        "attention": 4 * steps, "layer 1": 2 * steps, "layer 2": 2 * steps, **dict.fromkeys(heads, steps)}
    pooled = sum(stats[h].score_variance for h in heads) / 4
    assert stats["attention"].score_variance == pytest.approx(pooled)
    from nmt.analysis.hooks import recorded
    from nmt.data.batching import make_batch

    batch = make_batch([s for s, _ in pairs], [t for _, t in pairs], list(range(20)))
    with torch.no_grad(), recorded(model) as records:
        model(batch.src, batch.src_lengths, batch.tgt_in)
    weights = records["layer 2"][0].weights  # batch x heads x T x S
    real = batch.tgt_out != 0
    largest = weights[:, 0].max(dim=-1).values[real].double().mean().item()
    assert stats["layer 2 head 1"].max_weight == pytest.approx(largest, rel=1e-5)
    assert all(p.grad is None for p in model.parameters())
    # the loss per target token: the teacher-forced cross-entropy over every real target token (EOS included)
    with torch.no_grad():
        logits = model(batch.src, batch.src_lengths, batch.tgt_in)
    per_token = torch.nn.functional.cross_entropy(logits[real], batch.tgt_out[real]).item()
    assert [s.loss_per_token for s in stats.values()] == pytest.approx([per_token] * len(stats), rel=1e-5)


def test_dropping_sqrt_dk_multiplies_a_transformer_s_score_variance_by_dk() -> None:
    torch.manual_seed(0)
    config = ModelConfig(architecture="transformer", embedding_size=64, hidden_size=64, heads=1, layers=1,
                         feedforward_size=32)
    model, pairs = build_model(config, 20, 20), _pairs(20, seed=5)
    scaled = attention_statistics(model, pairs)["layer 1 head 1"].score_variance
    model.decoder_layers[0].cross_attention.scaled = False  # the same queries and keys, not divided by sqrt(64)
    assert attention_statistics(model, pairs)["layer 1 head 1"].score_variance == pytest.approx(64 * scaled)
    unscaled = build_model(ModelConfig(**{**config.__dict__, "scaled_attention": False}), 20, 20)
    attentions = [m for m in unscaled.modules() if hasattr(m, "scaled")]
    assert len(attentions) == 3 and not any(m.scaled for m in attentions)  # model.scaled_attention reaches all


@pytest.mark.slow
def test_the_command_measures_a_trained_run_and_writes_its_files(tmp_path: Path) -> None:
    config = reverse_task_config(
        tmp_path, n_train=200, model={"attention": "dot", "attention_size": 16, **TINY},
        training={"max_steps": 40, "validate_every": 40, "checkpoint_every": 40},
    )
    train(config, tmp_path / "run", resume=False)
    results = scaling_statistics([tmp_path / "run"], out_dir=tmp_path / "out")
    run = results["runs"]["run"]
    assert run["step"] == 40 and run["attention_size"] == 16
    assert run["trained"]["loss_per_token"] < run["initialisation"]["loss_per_token"]
    saved = json.loads((tmp_path / "out" / "attention_scaling.json").read_text())
    assert saved["runs"]["run"]["trained"] == pytest.approx(run["trained"])
    assert "| run | dot | 16 | init |" in (tmp_path / "out" / "attention_scaling.md").read_text()
    assert (tmp_path / "out" / "attention_scaling.png").read_bytes()[:4] == b"\x89PNG"


def test_runs_on_different_data_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the sample is the runs' common test split (nmt evaluate's rule), not the first run's alone
    import yaml

    from nmt.compare import evaluate
    from nmt.evaluation.testset import TestSet as Pairs
    from tests.helpers import fake_run

    runs = [fake_run(tmp_path / name, attention="dot") for name in ("a", "b")]
    for run in runs:
        config = yaml.safe_load((run / "config.yaml").read_text())
        config["data"]["dir"] = str(tmp_path / f"data-{run.name}")
        (run / "config.yaml").write_text(yaml.safe_dump(config))
    monkeypatch.setattr(evaluate, "split_test_set", lambda config, split: Pairs(
        [config.data.dir], ["x"], f"{split} split of {config.data.dir}"))
    with pytest.raises(NMTError, match="trained on different data"):
        scaling_statistics(runs, out_dir=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_run_without_attention_or_an_unwritable_out_is_refused_before_any_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # before the test split is read (or prepared) and before any run is measured
    from nmt.cli import main
    from nmt.compare import evaluate
    from tests.helpers import unwritable

    monkeypatch.setattr(evaluate, "split_test_set", lambda config, split: pytest.fail("the test split was read"))
    dot, fixed = fake_run(tmp_path / "dot", attention="dot"), fake_run(tmp_path / "fixed", attention="none")
    assert main(["attention-scaling", str(dot), str(fixed), "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == (
        "nmt attention-scaling: error: fixed has no attention (attention: none, RNNencdec): there are no attention "
        "scores to measure.\nGive runs with attention (RNNsearch, the Transformer); the fixed-vector model has one "
        "context for every step.\n"
    )
    (tmp_path / "ro").mkdir()
    unwritable(monkeypatch, tmp_path / "ro")
    assert main(["attention-scaling", str(dot), "--out", str(tmp_path / "ro")]) == 2
    assert capsys.readouterr().err == (
        f"nmt attention-scaling: error: --out {tmp_path / 'ro'}: it cannot be written (no permission to write there, "
        "or a read-only disk).\nGive --out a folder you can write; nothing was done.\n"
    )
    assert not (tmp_path / "out").exists() and list((tmp_path / "ro").iterdir()) == []


def test_progress_goes_to_stderr_and_only_the_report_to_stdout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from types import SimpleNamespace

    from nmt.compare import attention_scaling, evaluate
    from nmt.evaluation.testset import TestSet as Pairs
    from tests.helpers import fake_run

    def model() -> torch.nn.Module:
        torch.manual_seed(0)
        return build_model(ModelConfig(attention="dot", attention_size=8, **TINY), 20, 20)

    def ids(text: str) -> list[int]:
        return [int(word) for word in text.split()]

    tokenizer = SimpleNamespace(encode_src=ids, encode_tgt=ids, src_vocab_size=20, tgt_vocab_size=20)
    pairs = Pairs(["4 5 6", "7 8"], ["6 5 4", "8 7"], "test split")
    monkeypatch.setattr(evaluate, "split_test_set", lambda config, split: pairs)
    monkeypatch.setattr(attention_scaling, "load_run", lambda run_dir, checkpoint, device: SimpleNamespace(
        tokenizer=tokenizer, model=model(), step=7))
    monkeypatch.setattr(trainer, "initial_model", lambda config, src_vocab, tgt_vocab: model())
    scaling_statistics([fake_run(tmp_path / "run", attention="dot")], out_dir=tmp_path / "out", per_bucket=0)
    out, err = capsys.readouterr()
    assert "run: measured at initialisation and at step 7" in err
    assert out.startswith("# Attention scores") and "measured at" not in out  # stdout is the Markdown


def test_a_transformer_s_table_gives_each_layer_s_heads_then_the_layer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from types import SimpleNamespace

    from nmt.compare import attention_scaling, evaluate
    from nmt.evaluation.testset import TestSet as Pairs

    def model() -> torch.nn.Module:
        torch.manual_seed(0)
        return build_model(ModelConfig(architecture="transformer", embedding_size=16, hidden_size=16, heads=2,
                                       layers=2, feedforward_size=16), 20, 20)

    def ids(text: str) -> list[int]:
        return [int(word) for word in text.split()]

    tokenizer = SimpleNamespace(encode_src=ids, encode_tgt=ids, src_vocab_size=20, tgt_vocab_size=20)
    monkeypatch.setattr(evaluate, "split_test_set", lambda config, split: Pairs(["4 5 6"], ["6 5 4"], "test split"))
    monkeypatch.setattr(attention_scaling, "load_run", lambda run_dir, checkpoint, device: SimpleNamespace(
        tokenizer=tokenizer, model=model(), step=7))
    monkeypatch.setattr(trainer, "initial_model", lambda config, src_vocab, tgt_vocab: model())
    run = fake_run(tmp_path / "run", positions="sinusoidal")
    scaling_statistics([run], out_dir=tmp_path / "out", per_bucket=0)
    table = (tmp_path / "out" / "attention_scaling.md").read_text().split("per decoder layer and cross-attention head:")[1]
    parts = [row.split("|")[1].strip() for row in table.splitlines() if row.startswith("| layer")]
    # the layer's row, its heads together, closes its heads' rows, as a per-head table's mean column closes them
    order = ["layer 1 head 1", "layer 1 head 2", "layer 1", "layer 2 head 1", "layer 2 head 2", "layer 2"]
    assert parts == [part for part in order for _ in ("init", "trained")]


@pytest.mark.slow
def test_the_command_measures_a_trained_transformer_per_head(trained_transformer_run: Path, tmp_path: Path) -> None:
    results = scaling_statistics([trained_transformer_run], out_dir=tmp_path)
    run = results["runs"]["run"]
    assert (run["attention"], run["attention_size"]) == ("scaled_dot (Transformer)", 16)  # d_k = 32 / 2 heads
    assert set(run["parts"]) == {"layer 1", "layer 2", *(f"layer {n} head {h}" for n in (1, 2) for h in (1, 2))}
    assert run["trained"]["loss_per_token"] < run["initialisation"]["loss_per_token"]
    assert "run, per decoder layer and cross-attention head:" in (tmp_path / "attention_scaling.md").read_text()
