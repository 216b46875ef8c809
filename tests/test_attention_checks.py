"""nmt attention-checks on the reverse task (target = source reversed: word j aligns to word n-1-j), and the
attention perturbations it makes (nmt/analysis/hooks.py) on a trained run."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest
import torch
import yaml

from nmt.analysis import attention_checks as analysis_checks
from nmt.analysis.alignment import Agreement
from nmt.analysis.attention_checks import teacher_forced_argmax
from nmt.analysis.hooks import ablated, perturbed, recorded
from nmt.cli import main
from nmt.compare import attention_checks as checks_module
from nmt.compare.attention_checks import attention_checks
from nmt.data.batching import make_batch, make_source_batch
from nmt.data.prepared import load_prepared
from nmt.data.sources import prepared_dir
from nmt.decoding.search import greedy_hypotheses
from nmt.decoding.translator import Translator
from nmt.errors import NMTError
from nmt.rundir.loading import load_run
from tests.helpers import fake_run
from tests.synthetic import reversal_links, reverse_pairs


@pytest.fixture(scope="module")
def reverse_model(trained_reverse_run: Path):  # noqa: ANN201 - a LoadedRun
    return load_run(trained_reverse_run, device="cpu")


@pytest.fixture(scope="module")
def test_pairs(reverse_model) -> list[tuple[str, str]]:  # noqa: ANN001
    return load_prepared(reverse_model.config.data).pairs("test")


def test_perturbation_none_leaves_decoding_bitwise_unchanged(reverse_model, test_pairs) -> None:  # noqa: ANN001
    model, tokenizer = reverse_model.model, reverse_model.tokenizer
    src, lengths = make_source_batch([tokenizer.encode_src(s) for s, _ in test_pairs[:16]])
    limits = lengths + 5
    plain = greedy_hypotheses(model, src, lengths, limits, return_attention=True)
    with perturbed(model, "none"):
        inside = greedy_hypotheses(model, src, lengths, limits, return_attention=True)
    with perturbed(model, "uniform"):
        pass
    after = greedy_hypotheses(model, src, lengths, limits, return_attention=True)  # setting restored
    for a, b, c in zip(plain, inside, after, strict=True):
        assert a.tokens == b.tokens == c.tokens and a.log_prob == b.log_prob == c.log_prob
        assert torch.equal(a.attention, b.attention) and torch.equal(a.attention, c.attention)
    assert not model.decoder.provider.softmax.observed  # the hook is gone


def test_pairs_with_an_empty_side_are_skipped_even_when_no_pair_is_left(reverse_model) -> None:  # noqa: ANN001
    # a test set of such pairs only: no batch ran, and the agreement's lookup of the model's view was a KeyError
    views = teacher_forced_argmax(reverse_model.model, reverse_model.tokenizer, ["1 2", ""], ["", "3"], 16)
    assert views == {"attention": [None, None]}


def test_argmax_agrees_with_the_reversal_far_above_chance(reverse_model, test_pairs) -> None:  # noqa: ANN001
    sources, references = [s for s, _ in test_pairs], [t for _, t in test_pairs]
    argmaxes = teacher_forced_argmax(reverse_model.model, reverse_model.tokenizer, sources, references, 16)["attention"]
    counts = Agreement()
    for argmax, links, source in zip(argmaxes, reversal_links(sources), sources, strict=True):
        assert argmax is not None  # one piece per digit: words match
        counts.add(argmax, links, len(source.split()))
    summary = counts.summary()
    assert summary["chance"] < 0.2  # 5-10 digits + EOS
    assert summary["agreement"] > 0.8, summary


def _exact(translator: Translator, pairs: list[tuple[str, str]], kind: str) -> float:
    with perturbed(translator.model, kind, seed=3):  # type: ignore[arg-type]
        hyps = translator.translate([s for s, _ in pairs])
    return sum(h == t for h, (_, t) in zip(hyps, pairs, strict=True)) / len(pairs)


def test_uniform_and_permuted_weights_cost_accuracy(trained_reverse_run: Path, test_pairs) -> None:  # noqa: ANN001
    translator = Translator.from_run(trained_reverse_run, device="cpu", beam_size=1)
    exact = {kind: _exact(translator, test_pairs, kind) for kind in ("none", "uniform", "permute", "argmax")}
    assert exact["none"] > 0.6, exact
    assert exact["uniform"] < exact["none"] - 0.4, exact
    assert exact["permute"] < exact["none"] - 0.4, exact
    # all of the weight at the peak keeps where the model looks, which a permutation loses: some sentences survive
    assert exact["permute"] < exact["argmax"] < exact["none"], exact


def test_command_writes_its_three_files(trained_reverse_run: Path, tmp_path: Path) -> None:
    pytest.importorskip("eflomal", reason="pip install eflomal (the align extra) to run the aligner")
    results = attention_checks([trained_reverse_run], out_dir=tmp_path, steps=[60], device="cpu", batch_size=16)
    assert {p.name for p in tmp_path.iterdir()} == {"attention_checks.json", "attention_checks.md", "attention_checks.png"}
    run = results["runs"]["run"]
    assert run["perturbation"]["uniform"]["all"] < run["perturbation"]["none"]["all"]
    assert [point["checkpoint"] for point in run["alignment"]] == ["step_00000060.pt", "best.pt"]
    final = run["alignment"][-1]["all"]
    assert final["agreement"] > 0.8 and final["agreement"] > 3 * final["chance"]  # eflomal's links: the reversal
    saved = json.loads((tmp_path / "attention_checks.json").read_text())
    assert saved["sentences"] == 40
    # the scores' settings: sacrebleu's signature (the run's evaluation.tokenize), the bootstrap behind each p
    assert saved["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")
    assert (saved["bootstrap_samples"], saved["bootstrap_seed"]) == (1000, 12345)
    markdown = (tmp_path / "attention_checks.md").read_text()
    assert "| uniform |" in markdown
    assert f"BLEU: sacrebleu `{saved['bleu_signature']}`; p: paired bootstrap, 1000 resamples, seed 12345." in markdown


def test_the_report_explains_only_the_checks_it_ran(trained_reverse_run: Path, tmp_path: Path) -> None:
    attention_checks([trained_reverse_run], out_dir=tmp_path, checks=("perturbation",), device="cpu", batch_size=16)
    report = (tmp_path / "attention_checks.md").read_text()
    assert "- **uniform** spreads" in report and "Attention is not Explanation" in report
    assert "eflomal's (unsupervised" not in report and "Argmax agreement" not in report


def test_runs_with_other_buckets_are_scored_on_the_first_runs_buckets(trained_reverse_run: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    shutil.copytree(trained_reverse_run, other)
    config = yaml.safe_load((other / "config.yaml").read_text())
    config["evaluation"]["buckets"] = [2, 4]
    (other / "config.yaml").write_text(yaml.safe_dump(config))
    results = attention_checks([trained_reverse_run, other], out_dir=tmp_path / "out", checks=("perturbation",),
                               device="cpu", batch_size=16)
    labels = list(results["n"])
    assert results["runs"]["run"]["perturbation"]["none"]["bleu"].keys() == set(labels)
    assert results["runs"]["other"]["perturbation"]["none"]["bleu"].keys() == set(labels)
    assert "| uniform |" in (tmp_path / "out/attention_checks.md").read_text()


def test_a_src_file_is_cleaned_as_nmt_evaluate_cleans_it(
    trained_reverse_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's corpus source cleans a user's sentence before the model reads it (the Bible's ’ and spaces before
    punctuation; here a stand-in that drops a "~"): the checks score what `nmt evaluate` translates."""
    from nmt.data.sources.files import Files

    pairs = reverse_pairs(24, 5, 12, seed=7)
    ref = tmp_path / "ref.txt"
    ref.write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
    sources = {name: tmp_path / f"{name}.txt" for name in ("clean", "marked")}
    sources["clean"].write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
    sources["marked"].write_text("".join(s.replace(" ", " ~ ", 2) + "\n" for s, _ in pairs), encoding="utf-8")
    monkeypatch.setattr(Files, "clean_input", lambda self, text: " ".join(text.replace("~", "").split()))
    none = {name: attention_checks([trained_reverse_run], out_dir=tmp_path / name, src_path=path, ref_path=ref,
                                   checks=("perturbation",), per_bucket=0, device="cpu", batch_size=16)
            ["runs"]["run"]["perturbation"]["none"] for name, path in sources.items()}
    for scores in none.values():
        scores.pop("seconds")  # the time it took
    assert none["marked"] == none["clean"] and none["clean"]["all"] > 50


def test_perturbation_bleu_follows_the_runs_scoring_settings(
    trained_reverse_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nmt.evaluation import metrics, scoring

    run = tmp_path / "run"
    shutil.copytree(trained_reverse_run, run)
    config = yaml.safe_load((run / "config.yaml").read_text())
    config["evaluation"].update(tokenize="intl", lowercase=True)
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    built: list[tuple[str, bool]] = []

    class Spy(metrics.Bleu):
        def __init__(self, references: list[str], tokenize: scoring.Tokenize, lowercase: bool) -> None:
            built.append((tokenize, lowercase))
            super().__init__(references, tokenize, lowercase)

    monkeypatch.setattr(checks_module, "Bleu", Spy)
    attention_checks([run], out_dir=tmp_path / "out", checks=("perturbation",), device="cpu", batch_size=16)
    assert built == [("intl", True)]  # as nmt evaluate scores, and once for the four perturbations


def test_each_checkpoint_is_loaded_once(
    trained_reverse_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from nmt.rundir import loading

    loaded: list[str] = []

    def counting_load_run(run_dir: Path, checkpoint: Path | None, device: str) -> loading.LoadedRun:
        loaded.append(Path(checkpoint or "").name)
        return load_run(run_dir, checkpoint, device)

    monkeypatch.setattr(checks_module, "load_run", counting_load_run)
    monkeypatch.setattr(checks_module, "aligner_links", lambda run, test_set, how: reversal_links(test_set.sources))
    monkeypatch.setattr(checks_module, "require_aligner", lambda: None)
    results = attention_checks([trained_reverse_run], out_dir=tmp_path, steps=[60], device="cpu", batch_size=16)
    assert sorted(loaded) == ["best.pt", "step_00000060.pt"]  # the evaluated one serves both checks
    assert re.search(r"\(step 150\): argmax agreement \d+\.\d%\n", capsys.readouterr().err)  # a rate, not 0.96875
    alignment = results["runs"]["run"]["alignment"]
    assert [point["checkpoint"] for point in alignment] == ["step_00000060.pt", "best.pt"]


def test_a_run_without_attention_is_refused(tmp_path: Path) -> None:
    run = fake_run(tmp_path / "rnnencdec", attention="none")
    with pytest.raises(NMTError, match="no attention"):
        attention_checks([run], out_dir=tmp_path / "out", checks=("perturbation",))
    assert not (tmp_path / "out").exists()


    assert not (tmp_path / "out").exists()


def test_an_out_folder_that_cannot_be_written_is_refused_before_any_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # given with --out or not (RUN_DIR/evaluation): refused before the test split is read (or prepared) and
    # before the aligner is looked for
    from nmt.compare import evaluate
    from tests.helpers import unwritable

    monkeypatch.setattr(evaluate, "split_test_set", lambda config, split: pytest.fail("the test split was read"))
    monkeypatch.setattr(checks_module, "require_aligner", lambda: pytest.fail("the aligner was looked for"))
    run = fake_run(tmp_path / "run", attention="dot")
    (tmp_path / "ro").mkdir()
    for folder in (tmp_path / "ro", run):
        unwritable(monkeypatch, folder)
    assert main(["attention-checks", str(run), "--out", str(tmp_path / "ro" / "checks")]) == 2
    assert capsys.readouterr().err == (
        f"nmt attention-checks: error: --out {tmp_path / 'ro' / 'checks'}: {tmp_path / 'ro'}, where it would be made, "
        "cannot be written (no permission to write there, or a read-only disk).\nGive --out a folder you can write; "
        "nothing was done.\n"
    )
    assert main(["attention-checks", str(run)]) == 2
    assert capsys.readouterr().err == (
        f"nmt attention-checks: error: the report's folder {run / 'evaluation'} (without --out): {run}, where it "
        "would be made, cannot be written (no permission to write there, or a read-only disk).\nGive --out a "
        "folder you can write; nothing was done.\n"
    )
    assert list((tmp_path / "ro").iterdir()) == [] and not (run / "evaluation").exists()


def test_missing_step_checkpoint_is_named(
    trained_reverse_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(checks_module, "require_aligner", lambda: None)
    with pytest.raises(NMTError, match="step_00000045.pt"):
        attention_checks([trained_reverse_run], out_dir=tmp_path, steps=[45], checks=("alignment",), device="cpu")
    # a second run without the step: refused before the first run is loaded and checked
    shutil.copytree(trained_reverse_run, tmp_path / "other", ignore=shutil.ignore_patterns("step_00000060.pt"))
    monkeypatch.setattr(checks_module, "load_run", lambda *args: pytest.fail("a run was loaded"))
    with pytest.raises(NMTError, match=r"^other has no step_00000060.pt \(it keeps: "):
        attention_checks([trained_reverse_run, tmp_path / "other"], out_dir=tmp_path / "out", steps=[60], device="cpu")
    assert not (tmp_path / "out").exists()


def test_perturbation_none_and_recording_leave_training_bitwise_unchanged(trained_reverse_run: Path, test_pairs) -> None:  # noqa: ANN001
    loaded = load_run(trained_reverse_run, device="cpu")
    model, tokenizer = loaded.model.train(), loaded.tokenizer
    pairs = test_pairs[:8]
    batch = make_batch([tokenizer.encode_src(s) for s, _ in pairs], [tokenizer.encode_tgt(t) for _, t in pairs], list(range(8)))

    def loss_and_grads() -> tuple[torch.Tensor, list[torch.Tensor]]:
        model.zero_grad()
        logits = model(batch.src, batch.src_lengths, batch.tgt_in)
        loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), batch.tgt_out, ignore_index=0)
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]

    plain_loss, plain_grads = loss_and_grads()
    with perturbed(model, "none"), recorded(model) as records:
        inside_loss, inside_grads = loss_and_grads()
    assert len(records["attention"]) == batch.tgt_in.size(1)  # recording was on: one call per decoder step
    assert torch.equal(plain_loss, inside_loss)
    assert all(torch.equal(a, b) for a, b in zip(plain_grads, inside_grads, strict=True))


def test_command_line_arguments(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    from nmt.commands import attention_checks as command
    from nmt.compare import attention_checks as library

    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    run = str(fake_run(tmp_path / "run"))
    args = parser.parse_args([run, "--src", "a.txt", "--steps", "300,600", "--only", "alignment"])
    assert (args.steps, args.only, args.symmetrise, args.seed) == ([300, 600], "alignment", None, None)
    with pytest.raises(NMTError, match="--src and --ref go together"):
        command.run(args)
    with pytest.raises(NMTError, match=r"^give either --split or --src/--ref, not both\.$"):  # as nmt evaluate
        command.run(parser.parse_args([run, "--src", "a.txt", "--ref", "b.txt", "--split", "valid"]))
    with pytest.raises(NMTError, match="it must be >= 0") as error:  # nmt curve's words
        command.run(parser.parse_args([run, "--sentences-per-bucket", "-1"]))
    assert error.value.hint == "Give a count, or 0 for every sentence."
    # a check's own flags with --only the other check would do nothing: refused, naming the flag
    for flags, only, check in ((["--steps", "300"], "perturbation", "alignment"), (["--no-steps"], "perturbation", "alignment"),
                               (["--symmetrise", "intersection"], "perturbation", "alignment"),
                               (["--seed", "3"], "alignment", "perturbation")):
        with pytest.raises(NMTError, match=f"^{flags[0]} is a setting of the {check} check, which --only {only} leaves out") as error:
            command.run(parser.parse_args([run, *flags, "--only", only]))
        assert error.value.hint == f"Drop {flags[0]}, or --only."
    calls: list[dict[str, object]] = []
    monkeypatch.setattr(library, "attention_checks", lambda *_, **kwargs: calls.append(kwargs))
    command.run(parser.parse_args([run, "--seed", "0", "--only", "perturbation"]))  # seed 0 is given, not the default
    command.run(parser.parse_args([run, "--symmetrise", "intersection", "--only", "alignment"]))
    command.run(parser.parse_args([run]))  # the library's defaults
    assert (calls[0]["seed"], calls[0]["checks"], "symmetrisation" in calls[0]) == (0, ("perturbation",), False)
    assert (calls[1]["symmetrisation"], calls[1]["checks"], "seed" in calls[1]) == ("intersection", ("alignment",), False)
    assert "seed" not in calls[2] and "symmetrisation" not in calls[2]
    with pytest.raises(SystemExit):  # as for evaluate and curve: a split the data has
        parser.parse_args([run, "--split", "train"])
    with pytest.raises(SystemExit):  # one or the other: --no-steps does not silently win over --steps
        parser.parse_args([run, "--steps", "300", "--no-steps"])


def test_a_batch_size_under_1_is_refused_with_exit_status_2(capsys: pytest.CaptureFixture[str]) -> None:
    # by the argument's type, before any run is read (a batch of 0 sentences failed deep in decoding)
    for given, said in (("0", "0: it must be >= 1"), ("x", "expected a whole number, got 'x'")):
        with pytest.raises(SystemExit) as exit_:
            main(["attention-checks", "run", "--batch-size", given])
        assert exit_.value.code == 2
        assert capsys.readouterr().err.endswith(f"error: argument --batch-size: {said}\n")


def test_src_without_ref_is_refused_by_the_function_too(tmp_path: Path) -> None:
    # attention_checks checks it first, as evaluate_runs does: the split is not used instead
    with pytest.raises(NMTError, match="--src and --ref go together"):
        attention_checks([fake_run(tmp_path / "run")], out_dir=tmp_path / "out", src_path=tmp_path / "a.txt")


def test_a_missing_aligner_is_said_before_any_work_unless_only_the_perturbations_run(
    trained_reverse_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "eflomal", None)  # `import eflomal` fails as when it is not installed
    monkeypatch.setattr(checks_module, "aligner_installed", lambda: False)
    monkeypatch.setattr(analysis_checks, "Translator", None)  # no translation may start
    monkeypatch.setattr(checks_module, "cached_links", lambda data, test_set, how: None)  # nor links cached
    with pytest.raises(NMTError, match="eflomal is not installed"):
        attention_checks([trained_reverse_run], out_dir=tmp_path / "out")
    assert not (tmp_path / "out").exists()
    with pytest.raises(NMTError, match="does not exist"):
        attention_checks([tmp_path / "nothing"], out_dir=tmp_path / "out", checks=("perturbation",))


def test_the_aligner_s_links_are_cached_in_the_prepared_data_and_serve_a_machine_without_eflomal(
    trained_reverse_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GPU machine without eflomal measures the alignment check against the links computed where eflomal
    is (cached in the prepared folder, named by what they depend on); without either, an experiment's
    checks skip the alignment check and say so, and `nmt attention-checks` refuses it."""
    data_dir = Path(prepared_dir(load_run(trained_reverse_run, device="cpu").config.data))
    calls: list[int] = []

    def reversal_aligner(sources: list[str], targets: list[str], how: str) -> list[set[tuple[int, int]]]:
        calls.append(len(sources))
        return reversal_links(sources)

    monkeypatch.setattr(analysis_checks, "align_words", reversal_aligner)
    kwargs = {"steps": [], "device": "cpu", "batch_size": 16, "per_bucket": 3}
    shutil.rmtree(data_dir / analysis_checks.ALIGNMENTS, ignore_errors=True)  # other tests' links (real eflomal)
    try:
        first = attention_checks([trained_reverse_run], out_dir=tmp_path / "first", checks=("alignment",), **kwargs)
        cached = list((data_dir / analysis_checks.ALIGNMENTS).glob("grow-diag-final-and-*.json"))
        assert len(calls) == 1 and len(cached) == 1
        monkeypatch.setitem(sys.modules, "eflomal", None)  # as on the GPU machine
        monkeypatch.setattr(checks_module, "aligner_installed", lambda: False)
        again = attention_checks([trained_reverse_run], out_dir=tmp_path / "again", checks=("alignment",), **kwargs)
        assert len(calls) == 1  # read back, not aligned again
        assert again["runs"]["run"]["alignment"] == first["runs"]["run"]["alignment"]
        # another sample is other pairs: not in the cache
        with pytest.raises(NMTError, match="eflomal is not installed"):
            attention_checks([trained_reverse_run], out_dir=tmp_path / "other", checks=("alignment",),
                             **{**kwargs, "per_bucket": 2})
        skipped = attention_checks([trained_reverse_run], out_dir=tmp_path / "skipped",
                                   skip_alignment_without_aligner=True, **{**kwargs, "per_bucket": 2})
        assert "eflomal is not installed" in skipped["alignment_skipped"]
        assert set(skipped["runs"]["run"]) == {"run_dir", "checkpoint", "perturbation"}
    finally:
        shutil.rmtree(data_dir / analysis_checks.ALIGNMENTS, ignore_errors=True)  # the session's run is shared


def test_the_sample_per_bucket_defaults_to_the_curve_s(trained_reverse_run: Path, tmp_path: Path) -> None:
    import argparse

    from nmt.commands import attention_checks as command

    run = tmp_path / "run"
    shutil.copytree(trained_reverse_run, run)
    config = yaml.safe_load((run / "config.yaml").read_text())
    config["evaluation"]["curve_sentences_per_bucket"] = 3
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    per_bucket = parser.parse_args([str(run)]).sentences_per_bucket
    results = attention_checks([run], out_dir=tmp_path / "out", per_bucket=per_bucket, checks=("perturbation",),
                               device="cpu", batch_size=16)
    assert results["selection"].startswith("up to 3 per bucket") and max(results["n"].values()) == 3


@pytest.mark.slow
def test_some_transformer_head_finds_the_reversal(trained_transformer_run: Path) -> None:
    loaded = load_run(trained_transformer_run, device="cpu")
    pairs = load_prepared(loaded.config.data).pairs("test")
    sources, references = [s for s, _ in pairs], [t for _, t in pairs]
    views = teacher_forced_argmax(loaded.model, loaded.tokenizer, sources, references, 16)
    heads = [f"layer {layer} head {head}" for layer in (1, 2) for head in (1, 2)]
    assert list(views) == ["attention", *heads[:2], "layer 1 mean", *heads[2:], "layer 2 mean"]
    agreement, chance = {}, 0.0
    for view, argmaxes in views.items():
        counts = Agreement()
        for argmax, links, source in zip(argmaxes, reversal_links(sources), sources, strict=True):
            assert argmax is not None
            counts.add(argmax, links, len(source.split()))
        agreement[view], chance = counts.summary()["agreement"], counts.summary()["chance"]
    # a model that reverses a third of the sequences exactly: its best head 54% here, chance 13%
    assert max(agreement[view] for view in heads) > max(0.4, 3 * chance), (agreement, chance)
    assert agreement["attention"] == agreement["layer 2 mean"]  # the model's own weights: the last layer's mean


def _with_evaluation(run: Path, copy: Path, **evaluation: int) -> Path:
    """A copy of `run` whose config sets these evaluation keys."""
    shutil.copytree(run, copy)
    config = yaml.safe_load((copy / "config.yaml").read_text())
    config["evaluation"].update(evaluation)
    (copy / "config.yaml").write_text(yaml.safe_dump(config))
    return copy


@pytest.mark.slow
def test_the_command_reports_a_transformer_per_layer_and_head(trained_transformer_run: Path, tmp_path: Path) -> None:
    pytest.importorskip("eflomal", reason="pip install eflomal (the align extra) to run the aligner")
    run = _with_evaluation(trained_transformer_run, tmp_path / "run", min_bucket_sentences=20)  # of its 40 tests
    results = attention_checks([run], out_dir=tmp_path, device="cpu", batch_size=16)
    entry = results["runs"]["run"]
    points = entry["alignment"]
    assert [p["checkpoint"] for p in points] == ["step_00000150.pt", "step_00000300.pt", "best.pt"]
    assert set(points[-1]["heads"]) == {f"layer {n} {c}" for n in (1, 2) for c in ("head 1", "head 2", "mean")}
    report = (tmp_path / "attention_checks.md").read_text()
    assert "| layer | head 1 | head 2 | mean |" in report
    # the ablations: each head of each layer silenced, each layer uniform, each layer's best-aligning head alone
    ablations = entry["perturbation"]
    assert list(ablations)[:4] == ["none", "layer 1 head 1 silenced", "layer 1 head 2 silenced", "layer 1 uniform"]
    assert sum(kind.startswith("layer 2 only head") for kind in ablations) == 1
    assert "p_all" not in ablations["none"] and all(0 < s["p_all"] <= 1 for k, s in ablations.items() if k != "none")
    assert ablations["layer 2 uniform"]["all"] < ablations["none"]["all"] - 5  # the decoder reads where it looks
    assert "Heads whose silencing changes BLEU on all sentences by no more than chance" in report


@pytest.mark.slow
def test_an_ablation_is_tested_only_on_as_many_sentences_as_a_bucket_needs(
    trained_transformer_run: Path, tmp_path: Path
) -> None:
    """p against the unablated model, on all sentences and on the long ones, only where there are
    evaluation.min_bucket_sentences of them: a p of a handful of sentences would count as a finding."""
    test = load_run(trained_transformer_run, device="cpu").config.data
    sources = [src for src, _ in load_prepared(test).pairs("test")]
    long = sum(len(src.split()) >= 8 for src in sources)
    assert 0 < long < len(sources)
    for needed, tested in ((long, {"p_all", "p_long"}), (long + 1, {"p_all"}), (len(sources) + 1, set())):
        run = _with_evaluation(trained_transformer_run, tmp_path / str(needed) / "run", long_words=8,
                               min_bucket_sentences=needed)
        entry = attention_checks([run], checks=["perturbation"], device="cpu", per_bucket=0)["runs"]["run"]
        for kind, score in entry["perturbation"].items():
            assert {key for key in score if key.startswith("p_")} == (set() if kind == "none" else tested), kind


@pytest.mark.slow
def test_the_ablation_switches_leave_the_model_as_it_was(trained_transformer_run: Path) -> None:
    loaded = load_run(trained_transformer_run, device="cpu")
    src, lengths = make_source_batch([loaded.tokenizer.encode_src(s) for s, _ in reverse_pairs(8, 5, 10, seed=9)])
    plain = greedy_hypotheses(loaded.model, src, lengths, lengths + 5)
    with ablated(loaded.model.attention_points()["layer 2"], torch.tensor([0.0, 1.0])):
        silenced = greedy_hypotheses(loaded.model, src, lengths, lengths + 5)
    after = greedy_hypotheses(loaded.model, src, lengths, lengths + 5)
    assert [h.log_prob for h in plain] == [h.log_prob for h in after] != [h.log_prob for h in silenced]


def test_an_experiments_sample_is_aligned_once_and_found_cached(tmp_path: Path) -> None:
    """`gpu_converged.sh --align` caches the links of the sample an experiment's checks measure, where eflomal is;
    the GPU machine, without it, finds them (`experiment_links_cached`) and the checks read them."""
    pytest.importorskip("eflomal", reason="pip install eflomal (the align extra) to run the aligner")
    from nmt.config import config_from_dict
    from nmt.data.prepare import prepare
    from tests.helpers import reverse_task_config

    base = reverse_task_config(tmp_path, n_train=200).to_dict()
    config = config_from_dict({**base, "evaluation": {**base["evaluation"], "curve_sentences_per_bucket": 5},
                               "runs": {"encdec": {"model": {"attention": "none"}}, "search": {}}})
    prepare(config.data)
    assert checks_module.experiment_links_cached(config) is None
    path = checks_module.cache_experiment_links(config)
    assert checks_module.experiment_links_cached(config) == path and path.parent.name == "alignments"
    sample = checks_module._experiment_sample(config)[1]
    assert 0 < len(sample.references) < 40  # the curve sample of the test split, not all of it
    links = analysis_checks.cached_links(config.data, sample, "grow-diag-final-and")
    assert links is not None and len(links) == len(sample.references)
