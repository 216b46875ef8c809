"""`nmt evaluate`: run naming, where the report goes, effect pairs, and two real runs end to end (with
`nmt score` on their translations)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import sacrebleu

from nmt.cli import main
from nmt.compare import evaluate
from nmt.compare.evaluate import default_out_dir, effect_pairs, length_contrasts, plot_group, run_comparisons
from nmt.compare.runs import describe_runs, translate_cached
from nmt.config import load_config, save_config
from nmt.decoding.translator import Translator
from nmt.errors import NMTError
from nmt.evaluation import testset
from tests.helpers import fake_run, reverse_task_config, unwritable
from tests.synthetic import reverse_pairs, write_parallel


def test_run_names_are_unique_and_out_dir_defaults(tmp_path: Path) -> None:
    first = fake_run(tmp_path / "a" / "rnnsearch")
    second = fake_run(tmp_path / "b" / "rnnsearch")
    assert [r.name for r in describe_runs([first, second])] == ["rnnsearch", "rnnsearch-2"]
    assert [r.name for r in describe_runs([first, second], names=[" a-30", "b_30"])] == ["a-30", "b_30"]
    for names, said in ((["a"], "--names gives 1 name for 2 runs."), (["a", "a"], "--names a,a: the names must differ."),
                        (["a", "x/y"], "--names: 'x/y' cannot name a system"), (["a", ""], "--names: '' cannot")):
        with pytest.raises(NMTError, match=re.escape(said)):
            describe_runs([first, second], names=names)
    assert describe_runs([first])[0].checkpoint == first / "checkpoints" / "best.pt"
    assert default_out_dir([first]) == first / "evaluation"
    assert default_out_dir([first, second]) == tmp_path.resolve() / "evaluation"


def test_effect_pairs_follow_the_given_order_and_name_the_unpaired(tmp_path: Path) -> None:
    kinds = {"search-30": "additive", "encdec-30": "none", "search-50": "dot", "encdec-50": "none", "extra": "general"}
    runs = {run.name: run.config for run in describe_runs([fake_run(tmp_path / name, attention=kind) for name, kind in kinds.items()])}
    pairs, unpaired = effect_pairs(runs)
    assert pairs == [("encdec-30", "search-30"), ("encdec-50", "search-50")]
    assert unpaired == ["extra"]
    assert effect_pairs({"search-30": runs["search-30"]}) == ([], ["search-30"])


def test_effect_pairs_are_trained_on_the_same_lengths_whatever_their_order(tmp_path: Path) -> None:
    kinds = {"encdec-50": ("none", 50), "encdec-30": ("none", 30), "search-30": ("additive", 30),
             "search-50": ("additive", 50), "encdec-10": ("none", 10)}
    runs = {run.name: run.config for run in describe_runs([
        fake_run(tmp_path / name, attention=a, max_words=w) for name, (a, w) in kinds.items()])}
    assert effect_pairs(runs) == ([("encdec-50", "search-50"), ("encdec-30", "search-30")], ["encdec-10"])
    assert effect_pairs({name: runs[name] for name in ("encdec-30", "encdec-50", "search-50")}) == (
        [("encdec-50", "search-50")], ["encdec-30"])
    # no pair at all: the report says why the check is missing
    crossed = run_comparisons({name: runs[name] for name in ("encdec-30", "search-50")})
    assert crossed.pairs == [] and (crossed.note or "").startswith("not checked for the effect: encdec-30, search-50")
    # runs of one kind (attention runs alone, as a Transformer experiment's RNNs might be) were never meant to pair
    assert run_comparisons({name: runs[name] for name in ("search-30", "search-50")}).note is None
    assert run_comparisons({name: runs[name] for name in ("encdec-30", "encdec-50")}).note is None


def test_transformers_are_contrasted_with_runs_trained_on_the_same_lengths(tmp_path: Path) -> None:
    kinds = {  # name: (attention, positions, max_words)
        "search-30": ("additive", "", 30), "search-50": ("additive", "", 50), "encdec-30": ("none", "", 30),
        "t-30": ("additive", "sinusoidal", 30), "t-50": ("additive", "learned", 50),
        "t-30-rel": ("additive", "relative", 30),
    }
    runs = {run.name: run.config for run in describe_runs([
        fake_run(tmp_path / name, attention=a, positions=p, max_words=w) for name, (a, p, w) in kinds.items()
    ])}
    assert length_contrasts(runs) == [("t-30", "search-30"), ("t-30", "t-30-rel"), ("t-50", "search-50")]
    assert effect_pairs(runs) == ([("encdec-30", "search-30")], ["search-50"])  # Transformers pair with no fixed vector
    assert plot_group(runs["t-50"].model, 50) == ("Transformer (learned positions)", "-50")
    assert plot_group(runs["t-30"].model, 30) == ("Transformer", "-30")


def test_evaluate_takes_src_and_ref_together(tmp_path: Path) -> None:
    from nmt.compare.evaluate import evaluate_runs
    from nmt.errors import NMTError

    with pytest.raises(NMTError, match="--src and --ref go together"):  # not the split instead
        evaluate_runs([fake_run(tmp_path / "a")], src_path=tmp_path / "src.txt", out_dir=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_evaluate_refuses_an_nbest_which_would_change_the_best_it_scores(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a beam search that must end with 2 translations can end on another best than with 1: refused, not ignored
    run = fake_run(tmp_path / "a")
    assert main(["evaluate", str(run), "--set", "decoding.nbest=2", "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == (
        "nmt evaluate: error: nmt evaluate scores each run's best translation: decoding.nbest does not apply to it.\n"
        "Leave --set decoding.nbest out; nmt translate --nbest K writes the K best of each line.\n")
    assert not (tmp_path / "out").exists()


def test_a_split_that_cannot_be_prepared_again_points_to_src_and_ref(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run whose prepared data and corpus are both gone has no test split to be scored on: the error says
    what is missing and that --src/--ref evaluate it on files given instead."""
    run = fake_run(tmp_path / "run")
    save_config(reverse_task_config(tmp_path / "data", n_train=20), run / "config.yaml")
    for corpus in (tmp_path / "data").glob("*.*"):  # never prepared: as after both were deleted
        corpus.unlink()
    assert main(["evaluate", str(run)]) == 2
    err = capsys.readouterr().err
    assert "corpus file not found" in err
    assert "Without the test split, give --src FILE --ref FILE to use files of your own." in err


def test_not_a_run_is_a_user_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "s").write_text("a\n", encoding="utf-8")
    assert main(["evaluate", str(tmp_path), "--src", str(tmp_path / "s"), "--ref", str(tmp_path / "s")]) == 2
    assert "is not a training run (no config.yaml)" in capsys.readouterr().err


def test_translations_are_cached_per_device_type(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--device auto on a machine without a GPU re-uses the CPU's translations; another device type (whose
    floats differ in the last digits) would not find them."""
    import torch

    (run,) = describe_runs([fake_run(tmp_path / "run")])
    calls = []

    class Upper:
        def translate(self, sources: list[str]) -> list[str]:
            calls.append(sources)
            return [source.upper() for source in sources]

    monkeypatch.setattr(Translator, "from_run", lambda *args, **kwargs: Upper())
    test_set = testset.TestSet(["a b", "c"], ["x y", "z"], "--src s")
    hyps, path, cached = translate_cached(run, test_set, "cpu")
    assert (hyps, cached, json.loads(path.read_text(encoding="utf-8"))["key"]["device"]) == (["A B", "C"], False, "cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert translate_cached(run, test_set, "auto") == (["A B", "C"], path, True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # auto is now a GPU: translated anew
    again, cuda_path, cached = translate_cached(run, test_set, "auto")
    assert (again, cached, len(calls)) == (["A B", "C"], False, 2) and cuda_path != path


def test_a_run_that_cannot_be_written_is_scored_without_caching(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # a run on a read-only disk or of another user: the cache is only a saving, the scores are the point
    (run,) = describe_runs([fake_run(tmp_path / "run")])

    class Upper:
        def translate(self, sources: list[str]) -> list[str]:
            return [source.upper() for source in sources]

    monkeypatch.setattr(Translator, "from_run", lambda *args, **kwargs: Upper())
    unwritable(monkeypatch, tmp_path / "run" / "hyps")
    hyps, path, cached = translate_cached(run, testset.TestSet(["a b", "c"], ["x y", "z"], "--src s"), "cpu")
    assert (hyps, path, cached) == (["A B", "C"], None, False)  # no cache file for results.json to name
    assert re.fullmatch(r"run: translating 2 sentences with best.pt \(beam 5\)\nwarning: run: the translations could "
                        r"not be cached in \S+/run/hyps/[0-9a-f]{20}.json \(Permission denied\), so the next "
                        r"evaluation translates again; they are scored now.\n", capsys.readouterr().err)


def test_a_report_folder_that_cannot_be_written_is_refused_before_translating(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # a read-only run evaluated without --out: refused before the minutes of translating
    run = fake_run(tmp_path / "run")
    (tmp_path / "s").write_text("a\n", encoding="utf-8")
    unwritable(monkeypatch, run)
    assert main(["evaluate", str(run), "--src", str(tmp_path / "s"), "--ref", str(tmp_path / "s")]) == 2
    assert capsys.readouterr().err == (
        f"nmt evaluate: error: the report's folder {run / 'evaluation'} (without --out): {run}, where it would be "
        "made, cannot be written (no permission to write there, or a read-only disk).\nGive --out a folder you can "
        "write; nothing was done.\n")


def test_a_folder_of_the_user_s_own_files_is_refused_before_translating(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # --out a folder where no nmt report wrote its ref.txt and report.md: they are the user's, never replaced
    run = fake_run(tmp_path / "run")
    (tmp_path / "s").write_text("a\n", encoding="utf-8")
    out = tmp_path / "mine"
    out.mkdir()
    for name in ("ref.txt", "report.md", "notes.txt"):
        (out / name).write_text(f"my {name}\n", encoding="utf-8")
    monkeypatch.setattr(evaluate, "translate_cached", lambda *args: pytest.fail("translated"))
    argv = ["evaluate", str(run), "--src", str(tmp_path / "s"), "--ref", str(tmp_path / "s"), "--out", str(out)]
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        f"nmt evaluate: error: --out {out} holds report.md, ref.txt, which no nmt report wrote there: nmt evaluate's "
        f"report would replace them. Nothing was written.\nGive --out a folder of its own (a new or an empty one), "
        f"or move them out of {out}.\n")
    assert {path.name: path.read_text(encoding="utf-8") for path in out.iterdir()} == {
        name: f"my {name}\n" for name in ("ref.txt", "report.md", "notes.txt")}


def test_a_tokenizer_that_cannot_run_here_is_refused_before_translating(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # ja-mecab without sacrebleu's [ja] extra: refused before the minutes of translating, not after them
    try:
        sacrebleu.BLEU(tokenize="ja-mecab")
        pytest.skip("sacrebleu's ja extra is installed here: ja-mecab runs")
    except RuntimeError:
        pass
    run = fake_run(tmp_path / "run")
    (tmp_path / "s").write_text("a\n", encoding="utf-8")
    monkeypatch.setattr(evaluate, "translate_cached", lambda *args: pytest.fail("translated"))
    argv = ["evaluate", str(run), "--src", str(tmp_path / "s"), "--ref", str(tmp_path / "s"), "--out",
            str(tmp_path / "out"), "--set", "evaluation.tokenize=ja-mecab"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "ja-mecab" in err and "pip install 'sacrebleu[ja]'" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def _copy_run(trained: Path, dest: Path, beam_size: int) -> Path:
    shutil.copytree(trained, dest)
    config = load_config(dest / "config.yaml")
    config.decoding.beam_size = beam_size
    save_config(config, dest / "config.yaml")
    return dest


@pytest.mark.slow
def test_two_runs_end_to_end_with_cache(
    trained_reverse_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = [_copy_run(trained_reverse_run, tmp_path / "runs" / "beam2", 2),
            _copy_run(trained_reverse_run, tmp_path / "runs" / "greedy", 1)]
    prefix = write_parallel(tmp_path / "eval", reverse_pairs(30, 5, 12, seed=7))
    src, ref = Path(f"{prefix}.src"), Path(f"{prefix}.tgt")
    argv = ["evaluate", *map(str, runs), "--src", str(src), "--ref", str(ref), "--buckets", "8,10", "--device", "cpu"]

    import nmt.evaluation.report

    titles = []
    draw = nmt.evaluation.report.bleu_by_length_figure
    monkeypatch.setattr(nmt.evaluation.report, "bleu_by_length_figure",
                        lambda *args: (titles.append(args[2]), draw(*args))[1])
    assert main(argv) == 0
    out = tmp_path.resolve() / "runs" / "evaluation"
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    # the plot's title is the test set in a line (the runs' checkpoints are in the report), with no folder of the machine
    assert titles == [results["settings"]["test_set"]]
    assert re.fullmatch(r"--src eval.src, 30 sentences, sha256 [0-9a-f]{12}", titles[0])
    assert list(results["runs"]) == ["beam2", "greedy"]
    references = ref.read_text(encoding="utf-8").splitlines()
    for name, run in results["runs"].items():
        hyps = (out / f"{name}.hyp.txt").read_text(encoding="utf-8").splitlines()
        assert len(hyps) == run["n"] == 30
        assert run["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [references]).score, abs=1e-6)
        assert run["chrf"] == sacrebleu.corpus_chrf(hyps, [references]).score  # and chrF by bucket:
        lengths = [len(line.split()) for line in src.read_text(encoding="utf-8").splitlines()]
        for bucket, (low, high) in zip(run["buckets"], ((0, 8), (8, 10), (10, 10**6)), strict=True):
            rows = [i for i, n in enumerate(lengths) if low <= n < high]
            expected = sacrebleu.corpus_chrf([hyps[i] for i in rows], [[references[i] for i in rows]]).score
            assert bucket["chrf"] == (pytest.approx(expected) if rows else None)
        assert [b["label"] for b in run["buckets"]] == ["<8", "[8,10)", ">=10"]
        assert sum(b["n"] for b in run["buckets"]) == 30
    assert results["settings"]["runs"]["greedy"]["beam_size"] == 1
    report = (out / "report.md").read_text(encoding="utf-8")
    assert f"- test set: {titles[0]}\n" in report
    assert "- greedy: `greedy`, checkpoint best.pt (step 150" in report
    assert str(tmp_path) not in report + json.dumps(results)
    assert ", beam 1, length penalty gnmt (alpha 0.6)" in report and "## Examples" in report
    assert "![BLEU by source length](bleu_by_length.png)" in report
    assert "## chrF by sentence length" in report and "| beam2 chrF [CI] | greedy chrF [CI] |" in report
    # `nmt score` on the same translations goes through the same scoring path: the same numbers
    hyp_files = [str(out / f"{name}.hyp.txt") for name in results["runs"]]
    assert main(["score", "--ref", str(ref), "--src", str(src), *hyp_files, "--names", "beam2,greedy",
                 "--buckets", "8,10", "--out", str(tmp_path / "scored")]) == 0
    scored = json.loads((tmp_path / "scored" / "results.json").read_text(encoding="utf-8"))
    assert scored["runs"] == results["runs"] and scored["comparisons"] == results["comparisons"]
    (comparison,) = results["comparisons"]
    assert (comparison["a"], comparison["b"]) == ("beam2", "greedy")
    assert (out / "report.md").is_file() and (out / "bleu_by_length.png").is_file()
    first_output = capsys.readouterr()
    assert "translating 30 sentences" in first_output.err and "all " in first_output.out
    cache_files = {run: sorted((run / "hyps").iterdir()) for run in runs}
    assert all(len(files) == 1 for files in cache_files.values())
    stamps = {f: f.stat().st_mtime_ns for files in cache_files.values() for f in files}

    # second call, other buckets: translations come from RUN_DIR/hyps/, the model is never built
    import nmt.decoding.translator

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("translated again although the translations were cached")

    monkeypatch.setattr(nmt.decoding.translator.Translator, "from_run", refuse)
    assert main([*argv[:-4], "--buckets", "10", "--device", "cpu", "--out", str(tmp_path / "again"),
                 "--names", "wide,narrow"]) == 0
    second = json.loads((tmp_path / "again" / "results.json").read_text(encoding="utf-8"))
    assert list(second["runs"]) == ["wide", "narrow"] and (tmp_path / "again" / "wide.hyp.txt").is_file()
    assert second["runs"]["wide"]["bleu"] == results["runs"]["beam2"]["bleu"]
    assert [b["label"] for b in second["runs"]["wide"]["buckets"]] == ["<10", ">=10"]
    assert "re-using cached translations" in capsys.readouterr().err
    assert {f: f.stat().st_mtime_ns for files in cache_files.values() for f in files} == stamps
    # one run into the first report's folder: the other run's beam2.hyp.txt goes, as nmt score's would
    assert main(["evaluate", str(runs[1]), *argv[3:], "--out", str(out)]) == 0
    assert f"note: removed beam2.hyp.txt from {out}: the report there before wrote it" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == [
        "bleu_by_length.png", "greedy.hyp.txt", "ref.txt", "report.md", "results.json", "src.txt"
    ]


def test_empty_bucket_list_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["evaluate", "some-run", "--buckets", ","])
    assert exit_info.value.code == 2
    assert "expected at least one length cutoff, e.g. 10,20,30,40,50,60" in capsys.readouterr().err


def test_runs_that_prepared_other_data_into_one_folder_are_refused_whichever_comes_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The folder holds the data of whichever was prepared last: each order would score both runs on that one's
    test split. Refused by their settings, before the split is read (or prepared again)."""
    import yaml

    runs = [fake_run(tmp_path / name) for name in ("a", "b")]
    for run, size in zip(runs, (8000, 4000), strict=True):
        config = yaml.safe_load((run / "config.yaml").read_text())
        config["data"].update(dir=str(tmp_path / "prepared"), vocab_size=size)
        (run / "config.yaml").write_text(yaml.safe_dump(config))
    monkeypatch.setattr(evaluate, "split_test_set", lambda config, split: pytest.fail("the split was read"))
    for order in (runs, runs[::-1]):
        with pytest.raises(NMTError, match=r"trained on different data: (a and b|b and a) prepare theirs differently "
                                           r"\(data.vocab_size\) into the one data.dir \S+prepared"):
            evaluate.common_test_set(describe_runs(order), "test", None, None)


def test_a_src_file_is_bucketed_and_reported_as_the_model_reads_it(
    trained_reverse_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A --src is cleaned as the run's corpus was (the Bible's spaces before punctuation; here a stand-in that
    drops a "~"): its buckets count the words the model reads, as for the prepared split, and src.txt shows them."""
    from nmt.data.sources.files import Files

    pairs = reverse_pairs(24, 5, 12, seed=7)
    prefix = write_parallel(tmp_path / "eval", pairs)
    marked = tmp_path / "marked.src"
    marked.write_text("".join(s.replace(" ", " ~ ", 3) + "\n" for s, _ in pairs), encoding="utf-8")
    monkeypatch.setattr(Files, "clean_input", lambda self, text: " ".join(text.replace("~", "").split()))
    results = {
        name: evaluate.evaluate_runs([trained_reverse_run], src_path=src, ref_path=Path(f"{prefix}.tgt"),
                                     out_dir=tmp_path / name, device="cpu", overrides=["evaluation.buckets=[8,10]"])
        for name, src in (("clean", Path(f"{prefix}.src")), ("marked", marked))
    }
    counts = {name: [bucket["n"] for bucket in result["runs"]["run"]["buckets"]] for name, result in results.items()}
    assert counts["marked"] == counts["clean"] and len(set(counts["clean"])) > 1
    assert results["marked"]["runs"]["run"]["bleu"] == results["clean"]["runs"]["run"]["bleu"]
    assert (tmp_path / "marked/src.txt").read_text(encoding="utf-8") == Path(f"{prefix}.src").read_text(encoding="utf-8")


@pytest.mark.slow
def test_a_least_output_length_is_recorded_where_the_report_says_how_it_decoded(
    trained_reverse_run: Path, tmp_path: Path
) -> None:
    """--set decoding.min_length=N changes the translations: report.md's line on each run and results.json's
    settings say so (at 0, the default, they read as before the key existed)."""
    run = _copy_run(trained_reverse_run, tmp_path / "runs" / "greedy", 1)
    prefix = write_parallel(tmp_path / "eval", reverse_pairs(10, 5, 12, seed=7))
    argv = ["evaluate", str(run), "--src", f"{prefix}.src", "--ref", f"{prefix}.tgt", "--device", "cpu"]
    assert main([*argv, "--out", str(tmp_path / "plain")]) == 0
    assert main([*argv, "--set", "decoding.min_length=3", "--out", str(tmp_path / "least")]) == 0
    plain, least = (json.loads((tmp_path / name / "results.json").read_text())["settings"]["runs"]["greedy"]
                    for name in ("plain", "least"))
    assert "min_length" not in plain and least["min_length"] == 3
    assert ", beam 1, length penalty gnmt (alpha 0.6)\n" in (tmp_path / "plain" / "report.md").read_text()
    assert ", beam 1, length penalty gnmt (alpha 0.6), at least 3 pieces\n" in (tmp_path / "least" / "report.md").read_text()
