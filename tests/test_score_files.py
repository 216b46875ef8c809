"""nmt/evaluation/score_files.py (`nmt score`): any system's translation files scored by length through evaluate's
scoring path, and the report folder that path writes (nmt/evaluation/report_folder.py: its files, what an earlier
report left); the scoring library itself: tests/test_scoring.py."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import pytest
import sacrebleu

from nmt import fileio
from nmt.cli import main
from nmt.config import config_from_dict
from nmt.errors import NMTError
from nmt.evaluation import report_folder
from nmt.evaluation.buckets import sentence_lengths
from nmt.evaluation.leaders import TOO_FEW, Leader, _longest_answer, format_leaders
from nmt.evaluation.length_plot import plotted_buckets
from nmt.evaluation.report import format_examples, pick_examples
from nmt.evaluation.score_files import default_names, distinct_parts, score_files
from nmt.evaluation.scoring import score_systems
from nmt.evaluation.testset import given_names
from tests.helpers import scoring_settings, unwritable

VOCAB = [f"w{i}" for i in range(80)]


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.fixture()
def files(tmp_path: Path) -> dict[str, Path]:
    """Sources of 1..45 words, references = reversed sources, a good and a poor system."""
    rng = random.Random(3)
    sources = [" ".join(rng.choices(VOCAB, k=rng.randint(1, 45))) for _ in range(150)]
    references = [" ".join(reversed(s.split())) for s in sources]
    good = [" ".join(w if rng.random() < 0.85 else "x" for w in r.split()) for r in references]
    poor = [" ".join(w if rng.random() < 0.3 else "x" for w in r.split()) for r in references]
    return {
        "src": _write(tmp_path / "test.src", sources),
        "ref": _write(tmp_path / "test.ref", references),
        "good": _write(tmp_path / "search.hyp.txt", good),
        "poor": _write(tmp_path / "encdec.txt", poor),
    }


@pytest.fixture()
def long_tail(tmp_path: Path) -> dict[str, Path]:
    """A reference with WMT22 de-en's long tail (60 sentences in each 10-word bucket under 40 words, then 44,
    10 and 9 past 40, 50 and 60) and two systems: `steady` keeps 80% of the words at every length, `fading`
    95% under 40 words and 40% from 40."""
    rng = random.Random(5)
    lengths = [rng.randint(max(low, 1), low + 9) for low in (0, 10, 20, 30) for _ in range(60)]
    lengths += [rng.randint(40, 49) for _ in range(44)] + [rng.randint(50, 59) for _ in range(10)]
    lengths += [rng.randint(60, 80) for _ in range(9)]
    references = [" ".join(rng.choices(VOCAB, k=n)) for n in lengths]

    def system(keep: Callable[[int], float]) -> list[str]:
        return [" ".join(w if rng.random() < keep(len(r.split())) else "x" for w in r.split()) for r in references]

    return {
        "ref": _write(tmp_path / "newstest.ref", references),
        "steady": _write(tmp_path / "newstest.hyp.steady.en", system(lambda n: 0.8)),
        "fading": _write(tmp_path / "newstest.hyp.fading.en", system(lambda n: 0.95 if n < 40 else 0.4)),
    }


def test_buckets_auto_are_sized_so_that_every_one_can_be_tested(
    long_tail: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["score", str(long_tail["steady"]), str(long_tail["fading"]), "--ref", str(long_tail["ref"]),
            "--set", "evaluation.bootstrap_samples=100"]

    def buckets(out: str) -> list[tuple[str, int, bool]]:
        run = json.loads((tmp_path / out / "results.json").read_text(encoding="utf-8"))["runs"]["steady"]
        return [(b["label"], b["n"], b["ci"] is not None) for b in run["buckets"]]

    assert main([*argv, "--out", str(tmp_path / "default")]) == 0  # the default buckets, as before
    assert buckets("default")[-3:] == [("[40,50)", 44, False), ("[50,60)", 10, False), (">=60", 9, False)]
    assert "sized from the data" not in capsys.readouterr().out
    assert main([*argv, "--buckets", "auto", "--out", str(tmp_path / "auto")]) == 0
    assert buckets("auto") == [("<10", 60, True), ("[10,20)", 60, True), ("[20,30)", 60, True),
                               ("[30,40)", 60, True), (">=40", 63, True)]
    results = json.loads((tmp_path / "auto" / "results.json").read_text(encoding="utf-8"))
    how = ("the buckets were sized from the data (--buckets auto): 10-word buckets up to the longest sentence "
           f"({max(len(line.split()) for line in long_tail['ref'].read_text().splitlines())} words), each with "
           "fewer than evaluation.min_bucket_sentences = 50 sentences merged with its smaller neighbour, the "
           "smallest first: cutoffs 10,20,30,40")
    assert results["settings"]["buckets"] == [10, 20, 30, 40] and results["settings"]["buckets_sized"] == how
    assert f"Sentences bucketed by reference length in words; {how}." in (tmp_path / "auto" / "report.md").read_text()
    assert capsys.readouterr().out.startswith(how[0].upper() + how[1:] + ".\n")
    # --set and the flag are one route: the later wins; and the cutoffs follow min_bucket_sentences
    assert main([*argv, "--buckets", "auto", "--set", "evaluation.buckets=[20]", "--out", str(tmp_path / "a")]) == 0
    assert [label for label, _, _ in buckets("a")] == ["<20", ">=20"]
    assert main([*argv, "--set", "evaluation.buckets=[20]", "--set", "evaluation.buckets=auto",
                 "--set", "evaluation.min_bucket_sentences=100", "--out", str(tmp_path / "b")]) == 0
    assert buckets("b") == [("<20", 120, True), (">=20", 183, True)]


def test_who_is_better_on_long_sentences_follows_the_buckets(
    long_tail: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["score", str(long_tail["steady"]), str(long_tail["fading"]), "--ref", str(long_tail["ref"]),
            "--set", "evaluation.bootstrap_samples=200"]
    assert main([*argv, "--out", str(tmp_path / "default")]) == 0
    printed = capsys.readouterr().out
    report = (tmp_path / "default" / "report.md").read_text(encoding="utf-8")
    leaders = json.loads((tmp_path / "default" / "results.json").read_text(encoding="utf-8"))["leaders"]
    assert [(x["bucket"], x["best"], x["ahead"]) for x in leaders] == [
        ("<10", "fading", True), ("[10,20)", "fading", True), ("[20,30)", "fading", True),
        ("[30,40)", "fading", True), ("[40,50)", "steady", None), ("[50,60)", "steady", None),
        (">=60", "steady", None), ("all", "fading", False)]
    assert "| [30,40) | 60 | fading | steady | +" in report and "| >=60 | 9 | steady | fading | +" in report
    longest = ("The longest sentences (>=60, 9 sentences) are too few to test (evaluation.min_bucket_sentences = "
               "50; --buckets auto merges small buckets with their neighbours until each can be tested, where the "
               "sentences are enough). "
               "On the longest bucket that can be tested ([30,40), 60 sentences), "
               "fading is better: +")
    assert "## Who is better, by length" in report and longest in report and longest in printed
    assert main([*argv, "--buckets", "auto", "--out", str(tmp_path / "auto")]) == 0
    report = (tmp_path / "auto" / "report.md").read_text(encoding="utf-8")
    (long,) = [x for x in json.loads((tmp_path / "auto" / "results.json").read_text())["leaders"] if x["bucket"] == ">=40"]
    assert (long["best"], long["runner_up"], long["ahead"], long["n"]) == ("steady", "fading", True, 63)
    assert long["bleu_diff"] > 10 and long["p"] < 0.05
    assert (f"On the longest sentences (>=40, 63 sentences), steady is better: {long['bleu_diff']:+.2f} BLEU over "
            f"fading (p={long['p']:.3f}).") in report
    # the same systems on a bucket of 20+ words: the fall past 40 words is diluted
    assert main([*argv, "--buckets", "20", "--out", str(tmp_path / "20")]) == 0
    assert ("On the longest sentences (>=20, 183 sentences), steady and fading cannot be told apart: +"
            in (tmp_path / "20" / "report.md").read_text(encoding="utf-8"))
    capsys.readouterr()
    # one system: no one to be better than
    assert main(["score", str(long_tail["steady"]), "--ref", str(long_tail["ref"]), "--out", str(tmp_path / "one")]) == 0
    assert "Who is better" not in (tmp_path / "one" / "report.md").read_text() + capsys.readouterr().out


def test_who_is_better_says_nothing_of_systems_too_weak_to_show_anything(tmp_path: Path) -> None:
    """Two systems under 1 BLEU: a few matched words decide who leads and the test's p, as evaluate's checks
    say (low_bleu); no bucket names one of them better."""
    references = [" ".join(f"w{i}x{j}" for j in range(12)) for i in range(120)]
    matched = [" ".join(f"w{i}x{j}" for j in range(4)) + " zz yy" if i % 15 == 0 else "zz yy qq rr" for i in range(120)]
    weak = {"a": [f"w{i}x0 zz yy qq" for i in range(120)], "b": matched}  # BLEU 0.06 and 0.93
    for name, lines in {"ref": references, **weak}.items():
        (tmp_path / f"{name}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    assert main(["score", str(tmp_path / "a.txt"), str(tmp_path / "b.txt"), "--ref", str(tmp_path / "ref.txt"),
                 "--out", str(out), "--set", "evaluation.bootstrap_samples=100",
                 "--set", "evaluation.min_bucket_sentences=10"]) == 0
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert all(run["bleu"] < 1 for run in results["runs"].values())
    leaders = results["leaders"]
    assert leaders and all(x["ahead"] is None and x["untold"].startswith("cannot tell: ") for x in leaders)
    assert leaders[-1]["p"] is not None and leaders[-1]["p"] < 0.05  # the test alone would have called it
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "**ahead**" not in report and "a BLEU this low chooses by noise, whatever its p." in report


def test_score_two_files_with_source(files: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "out"
    argv = ["score", "--ref", str(files["ref"]), "--src", str(files["src"]), str(files["poor"]), str(files["good"]),
            "--buckets", "10,20,30", "--out", str(out), "--set", "evaluation.bootstrap_samples=100"]
    assert main(argv) == 0
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert set(results) == {"runs", "comparisons", "settings", "leaders"}  # `nmt evaluate`'s, and who leads
    assert list(results["runs"]) == ["encdec", "search"]  # named by file, .txt / .hyp.txt dropped
    references = files["ref"].read_text(encoding="utf-8").splitlines()
    for name, key in (("encdec", "poor"), ("search", "good")):
        hyps = files[key].read_text(encoding="utf-8").splitlines()
        assert results["runs"][name]["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [references]).score)
        assert (out / f"{name}.hyp.txt").read_text(encoding="utf-8").splitlines() == hyps
        assert results["settings"]["runs"][name] == {"hypotheses": files[key].name}  # outside here and --out
    assert [b["label"] for b in results["runs"]["search"]["buckets"]] == ["<10", "[10,20)", "[20,30)", ">=30"]
    (comparison,) = results["comparisons"]
    assert (comparison["a"], comparison["b"]) == ("encdec", "search") and comparison["p"] < 0.05
    settings = results["settings"]
    assert (settings["by"], settings["bootstrap_samples"], settings["tokenize"]) == ("source", 100, "13a")
    assert "effect" not in results
    report = (out / "report.md").read_text(encoding="utf-8")
    assert re.search(r"- test set: --src test.src, 150 sentences, sha256 [0-9a-f]{12}\n", report)
    assert "- search: `search.hyp.txt`" in report
    assert settings["test_set"] in report and str(tmp_path) not in report + json.dumps(results)
    assert "## Examples" in report and "| source |" in report
    assert (out / "bleu_by_length.png").is_file() and (out / "src.txt").is_file()


@pytest.mark.parametrize("command", ["score", "evaluate", "curve", "attention-checks"])
def test_no_report_is_written_into_an_experiment_s_folder(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """An experiment's report.md and results.json hold its training, timings and checks, and its report shows its
    learning curve and attention checks of all its runs: `nmt score`, `nmt evaluate`, `nmt curve` and `nmt
    attention-checks` refuse its folder as --out before any work, rather than replace them."""
    out = tmp_path / "experiment"
    out.mkdir()
    kept = {"timings.json": '{"sessions": []}', "report.md": "# the experiment", "results.json": "{}",
            "learning_curve.json": "{}", "attention_checks.json": "{}"}
    for name, text in kept.items():
        (out / name).write_text(text, encoding="utf-8")
    argv = (["score", "--ref", str(files["ref"]), str(files["good"])] if command == "score"
            else [command, str(tmp_path / "run")])
    assert main([*argv, "--out", str(out)]) == 2
    replaced = {"curve": "learning_curve.json, .md and .png",
                "attention-checks": "attention_checks.json, .md and .png"}.get(command, "report.md and results.json")
    assert (f"error: --out {out} is an experiment's folder (timings.json): nmt {command}'s report would replace the "
            f"experiment's {replaced}. Nothing was written.") in capsys.readouterr().err
    assert {path.name: path.read_text(encoding="utf-8") for path in out.iterdir()} == kept


@pytest.mark.slow
def test_score_reports_chrf_by_bucket_with_intervals(files: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = subprocess.run([sys.executable, "-m", "nmt", "score", "--ref", str(files["ref"]), "--src", str(files["src"]),
                             str(files["poor"]), str(files["good"]), "--buckets", "20", "--out", str(out),
                             "--set", "evaluation.bootstrap_samples=100"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    sources = files["src"].read_text(encoding="utf-8").splitlines()
    references = files["ref"].read_text(encoding="utf-8").splitlines()
    hyps = files["good"].read_text(encoding="utf-8").splitlines()
    run = results["runs"]["search"]
    assert run["chrf"] == sacrebleu.corpus_chrf(hyps, [references]).score
    assert run["chrf_ci"][0] < run["chrf"] < run["chrf_ci"][1] and run["chrf_signature"].startswith("nrefs:1|")
    for bucket, short in zip(run["buckets"], (True, False), strict=True):
        rows = [i for i, s in enumerate(sources) if (len(s.split()) < 20) == short]
        expected = sacrebleu.corpus_chrf([hyps[i] for i in rows], [[references[i] for i in rows]]).score
        assert bucket["chrf"] == pytest.approx(expected) and bucket["chrf_ci"][0] < expected < bucket["chrf_ci"][1]
        assert 0 < bucket["chrf_floor"] < bucket["chrf"]
    (comparison,) = results["comparisons"]
    assert comparison["chrf_diff"] == pytest.approx(run["chrf"] - results["runs"]["encdec"]["chrf"])
    assert comparison["chrf_p"] < 0.05 and all(b["chrf_p"] < 0.05 for b in comparison["buckets"])
    report = (out / "report.md").read_text(encoding="utf-8")
    ci = run["chrf_ci"]
    assert "## chrF by sentence length" in report
    assert f"| {run['chrf']:.2f} [{ci[0]:.2f}, {ci[1]:.2f}] | {comparison['chrf_diff']:+.2f} (p=" in report
    assert "search chrF [CI]" in result.stdout


def test_baseline_runs_the_effect_checks_against_every_other_system(files: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "out"
    argv = ["score", "--ref", str(files["ref"]), "--src", str(files["src"]), str(files["poor"]), str(files["good"]),
            str(files["good"]), "--names", "encdec,search,copy", "--baseline", "encdec", "--out", str(out),
            "--set", "evaluation.bootstrap_samples=50", "--set", "evaluation.min_bucket_sentences=10"]
    assert main(argv) == 0
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert [(e["baseline"], e["attention"]) for e in results["effect"]] == [("encdec", "search"), ("encdec", "copy")]
    assert results["effect"][0]["checks"][0]["passed"] is True  # search above encdec from 20 words
    assert "Does the table show the effect? (encdec vs search)" in (out / "report.md").read_text(encoding="utf-8")


def test_config_pairs_the_systems_as_its_runs(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--config: the systems are runs of a config, by name, and are compared as nmt evaluate compares those runs:
    each fixed vector with the attention run of its ceiling, and across ceilings (the paper's check 5)."""
    out = tmp_path / "out"
    hyps = [str(files[kind]) for kind in ("poor", "good", "poor", "good")]
    argv = ["score", "--ref", str(files["ref"]), "--src", str(files["src"]), *hyps, "--out", str(out),
            "--set", "evaluation.bootstrap_samples=50", "--set", "evaluation.min_bucket_sentences=10",
            "--config", "configs/quick.yaml"]
    assert main([*argv, "--names", "rnnencdec-30,rnnsearch-30,rnnencdec-50,rnnsearch-50"]) == 0
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert [(e["baseline"], e["attention"]) for e in results["effect"]] == [
        ("rnnencdec-30", "rnnsearch-30"), ("rnnencdec-50", "rnnsearch-50"), ("rnnencdec-50", "rnnsearch-30"),
    ]
    # the -50 attention run is held to the flat check (3), the -30 one is not: the ceilings came with the runs
    claims = {(e["baseline"], e["attention"]): [check["claim"] for check in e["checks"]] for e in results["effect"]}
    assert any("at least 0.75" in claim for claim in claims[("rnnencdec-50", "rnnsearch-50")])
    assert not any("at least 0.75" in claim for claim in claims[("rnnencdec-30", "rnnsearch-30")])
    assert main([*argv, "--names", "rnnencdec-30,rnnsearch-30,rnnencdec-50,rnnsearch50"]) == 2
    err = capsys.readouterr().err
    assert ("--config configs/quick.yaml: its runs are rnnencdec-30, rnnsearch-30, rnnencdec-50, rnnsearch-50; "
            "no run is named 'rnnsearch50'.") in err
    assert "--names, one name per HYP, in order." in err
    with pytest.raises(SystemExit):  # one way to say what is compared
        main([*argv, "--baseline", "rnnencdec-30"])
    assert "not allowed with argument" in capsys.readouterr().err


def test_without_source_buckets_by_reference(files: dict[str, Path], tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["score", "--ref", str(files["ref"]), str(files["good"]), "--out", str(out)]) == 0
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["settings"]["by"] == "reference"
    assert re.fullmatch(r"--ref test.ref, 150 sentences, sha256 [0-9a-f]{12}", results["settings"]["test_set"])
    assert not (out / "src.txt").exists()
    assert "| source |" not in (out / "report.md").read_text(encoding="utf-8")
    assert main(["score", "--ref", str(files["ref"]), str(files["good"]), "--by", "source"]) == 2
    assert "--by source needs the source sentences" in capsys.readouterr().err


def test_a_baseline_is_named_by_its_file_s_stem_too(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy, search = files["poor"].rename(tmp_path / "copy.fr"), files["good"].rename(tmp_path / "search.fr")
    options = ["--ref", str(files["ref"]), "--out", str(tmp_path / "out"), "--set", "evaluation.bootstrap_samples=40"]
    for baseline in ("copy", "copy.fr"):  # its name (what differs from search.fr), its file's stem or name
        assert main(["score", str(copy), str(search), *options, "--baseline", baseline]) == 0
        results = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
        assert [(e["baseline"], e["attention"]) for e in results["effect"]] == [("copy", "search")]
    # a system file named as `nmt evaluate` writes them (NAME.hyp.txt): NAME is its stem, here too
    hyp = copy.rename(tmp_path / "rnnencdec.hyp.txt")
    assert main(["score", str(hyp), str(search), *options, "--names", "a,b", "--baseline", "rnnencdec"]) == 0
    results = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    assert [(e["baseline"], e["attention"]) for e in results["effect"]] == [("a", "b")]
    copy = hyp.rename(tmp_path / "copy.fr")
    assert main(["score", str(copy), str(search.rename(tmp_path / "copy.de")), *options, "--baseline", "copy"]) == 2
    err = capsys.readouterr().err
    assert "--baseline copy: it names fr (copy.fr) and de (copy.de)." in err and "The systems are: fr, de; give" in err
    # one system's name and another's file stem: two systems, refused (the name was taken without a word)
    (tmp_path / "nb").mkdir()
    spaced, dashed = copy.rename(tmp_path / "nb" / "sys v2.txt"), tmp_path / "nb" / "sys-v2.txt"
    dashed.write_text(spaced.read_text(encoding="utf-8"), encoding="utf-8")
    assert main(["score", str(spaced), str(dashed), *options, "--baseline", "sys-v2"]) == 2
    assert "--baseline sys-v2: it names sys-v2 (sys v2.txt) and sys-v2-2 (sys-v2.txt)." in capsys.readouterr().err


def test_systems_are_named_by_what_differs_between_their_files(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    wmt = tmp_path / "wmt22"
    wmt.mkdir()
    hyps = [files["good"].rename(wmt / "generaltest2022.de-en.hyp.JDExploreAcademy.en"),
            files["poor"].rename(wmt / "generaltest2022.de-en.hyp.Online-B.en")]
    options = ["--ref", str(files["ref"]), "--set", "evaluation.bootstrap_samples=40"]
    assert main(["score", *map(str, hyps), *options, "--out", str(tmp_path / "a")]) == 0
    table = capsys.readouterr().out.split("\n\n")[0]
    assert table.splitlines()[0].split() == [
        "bucket", "n", "JDExploreAcademy", "BLEU", "[CI]", "Online-B", "BLEU", "[CI]", "Online-B", "-", "JDExploreAcademy",
        "(p)"]
    assert max(map(len, table.splitlines())) < 120  # it was 243 characters wide with the whole file names
    results = json.loads((tmp_path / "a" / "results.json").read_text(encoding="utf-8"))
    assert results["settings"]["runs"]["Online-B"] == {"hypotheses": "generaltest2022.de-en.hyp.Online-B.en"}
    # one file keeps its name (less .txt, .hyp); one name in two folders: the folders; --names overrides
    assert main(["score", str(hyps[0]), *options, "--out", str(tmp_path / "b")]) == 0
    assert list(json.loads((tmp_path / "b" / "results.json").read_text())["runs"]) == [hyps[0].name]
    (tmp_path / "sys1").mkdir(), (tmp_path / "sys2").mkdir()
    same = [hyps[0].rename(tmp_path / "sys1" / "out.txt"), hyps[1].rename(tmp_path / "sys2" / "out.txt")]
    assert main(["score", *map(str, same), *options, "--out", str(tmp_path / "c")]) == 0
    assert list(json.loads((tmp_path / "c" / "results.json").read_text())["runs"]) == ["sys1", "sys2"]
    assert main(["score", *map(str, same), *options, "--names", "x,y", "--out", str(tmp_path / "d")]) == 0
    assert list(json.loads((tmp_path / "d" / "results.json").read_text())["runs"]) == ["x", "y"]
    # files as a report writes them, NAME.hyp.txt: their NAMEs whole, not what differs between them
    reported = [same[0].rename(tmp_path / "rnnencdec-30.hyp.txt"), same[1].rename(tmp_path / "rnnsearch-30.hyp.txt")]
    assert main(["score", *map(str, reported), *options, "--out", str(tmp_path / "e")]) == 0
    assert list(json.loads((tmp_path / "e" / "results.json").read_text())["runs"]) == ["rnnencdec-30", "rnnsearch-30"]


@pytest.mark.parametrize(
    ("texts", "parts"),
    [
        (["t.de-en.hyp.A.en", "t.de-en.hyp.B-2.en", "t.de-en.hyp.C_x.en"], ["A", "B-2", "C_x"]),
        (["run_1", "run_2"], ["1", "2"]),
        (["x.en", "x.y.en"], ["x", "x.y"]),  # x would be empty: less prefix cut
        (["a.en", "b.en", "b.en"], ["a", "b", "b"]),  # the same file twice stays the same (then b-2)
        (["OnlineB.en", "OnlineB.en"], ["OnlineB.en", "OnlineB.en"]),
        (["alone.en"], ["alone.en"]),
        (["abc", "abd"], ["abc", "abd"]),  # cut only at separators
        (["-", "a"], ["-", "a"]),  # a name of separators alone (stdin's "-"): as it is, where the search never ended
        (["_", "-"], ["_", "-"]),
    ],
)
def test_distinct_parts(texts: list[str], parts: list[str]) -> None:
    assert distinct_parts(texts) == parts


def test_a_default_name_holds_no_character_a_shell_would_need_quoted(tmp_path: Path) -> None:
    # NAME.hyp.txt is written into --out: a process substitution's pipe (pipe:[N]) or a file name with spaces
    # gives a name of letters, digits, '.', '-' and '_'
    pipe = tmp_path / "pipe:[4242]"
    pipe.write_text("x\n", encoding="utf-8")
    assert default_names([pipe]) == ["pipe-4242"]
    assert default_names([tmp_path / "my system (v2).txt", tmp_path / "système.v3.txt"]) == ["my-system-v2", "système.v3"]
    # two names of one stem in one folder: told apart by their names, not by the machine's folders
    assert default_names([tmp_path / "output.txt", tmp_path / "output.hyp.txt"]) == ["output", "output.hyp"]
    assert default_names([tmp_path / "-", tmp_path / "sys.txt"]) == ["system", "sys"]
    assert default_names([tmp_path / ("y" * 250 + ".txt")]) == ["y" * 100]  # its NAME.hyp.txt fits a file name


@pytest.mark.parametrize("name", ["x\ny", "a b", "c*d", ".hidden", "x" * 101, "a/b", ""])
def test_a_given_name_is_one_a_file_name_and_a_table_header_can_hold(name: str) -> None:
    with pytest.raises(NMTError, match=r"^--names: .* cannot name a system \(it names its NAME.hyp.txt file too\)\."):
        given_names([name, "b"], 2, "translation files", "file")
    assert given_names(["système_v2.1", "b-2"], 2, "translation files", "file") == ["système_v2.1", "b-2"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("short", r"encdec.txt has 149 lines but --ref .*test.ref has 150"),
        ("empty", r"HYP .*encdec.txt is empty"),
        ("names", r"--names gives 1 name for 2 translation files"),
        ("baseline", r"--baseline nobody: no such system"),
        ("learning", r"--set model.hidden_size=8: nmt score takes only evaluation.\* keys"),
        ("src", r"--src .*test.src has 150 lines but --ref .*test.ref has 149\.\n"),
        ("blank", r"encdec.txt has 152 lines but --ref .*test.ref has 150 \(the longer ends in 2 blank lines: "
                  r"remove them\)\.\n"),
        ("blank-src", r"--src .*test.src has 151 lines but --ref .*test.ref has 150 \(the longer ends in 1 blank "
                      r"line: remove it\)\.\n"),
    ],
)
def test_user_errors(files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
                     change: str, message: str) -> None:
    argv = ["score", "--ref", str(files["ref"]), str(files["poor"]), str(files["good"]), "--out", str(tmp_path / "o")]
    lines = files["poor"].read_text(encoding="utf-8").splitlines()
    if change == "short":
        _write(files["poor"], lines[:-1])
    elif change == "empty":
        files["poor"].write_text("", encoding="utf-8")
    elif change == "names":
        argv += ["--names", "one"]
    elif change == "baseline":
        argv += ["--baseline", "nobody"]
    elif change == "learning":
        argv += ["--set", "model.hidden_size=8"]
    elif change == "src":
        _write(files["ref"], files["ref"].read_text(encoding="utf-8").splitlines()[:-1])
        argv += ["--src", str(files["src"])]
    elif change == "blank":  # an editor's empty lines at the end: said to be the difference
        _write(files["poor"], [*lines, "", " "])
    elif change == "blank-src":
        _write(files["src"], [*files["src"].read_text(encoding="utf-8").splitlines(), ""])
        argv += ["--src", str(files["src"])]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert len(re.findall(message, err)) == 1, err
    assert not (tmp_path / "o").exists()  # nothing written


def test_a_count_of_one_is_singular_and_an_empty_src_or_ref_is_called_empty(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Counts agree with their nouns ("1 line", "1 word", "1 sentence"; a file of CR line ends is refused by its line),
    and an empty --src or --ref is said to be empty, as an empty HYP is, not to have 0 lines, with nothing to score
    (not evaluate: the message is evaluate's too)."""
    two, one, empty = _write(tmp_path / "two.txt", ["x", "y"]), _write(tmp_path / "one.txt", ["x"]), tmp_path / "empty.txt"
    empty.write_text("", encoding="utf-8")
    cr = tmp_path / "cr.txt"
    cr.write_bytes(b"a b\rc d\r")
    assert main(["score", "--ref", str(two), str(cr)]) == 2
    assert f"HYP {cr}, line 1: a carriage return (CR) that ends no line (1 such CR in the file" in capsys.readouterr().err
    assert main(["score", "--ref", str(two), str(one)]) == 2
    assert f"{one} has 1 line but --ref {two} has 2." in capsys.readouterr().err
    assert main(["score", "--ref", str(two), "--src", str(empty), str(two)]) == 2
    assert f"error: --src {empty} is empty: nothing to score." in capsys.readouterr().err
    assert main(["score", "--ref", str(empty), "--src", str(two), str(two)]) == 2
    assert f"error: --ref {empty} is empty: nothing to score." in capsys.readouterr().err
    assert main(["score", "--ref", str(one), str(one), "--buckets", "auto", "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "up to the longest sentence (1 word), each" in out
    assert "no two such buckets can be made of 1 sentence, so two as even as their lengths allow" in out


def test_the_reports_counts_of_one_sentence_or_word_are_singular() -> None:
    """report.md's who-is-better section and its examples say "1 sentence" and "1 source word", as for any
    other count the plural."""
    settings = scoring_settings()
    ahead, too_few = Leader("<10", 1, "a", "b", 5.0, 0.01, True), Leader(">=40", 1, "a", "b", 1.0, None, None, TOO_FEW)
    text = format_leaders([ahead], settings)
    assert "evaluation.min_bucket_sentences = 1 sentence is too small to test." in text
    assert "On the longest sentences (<10, 1 sentence), a is better" in text
    text = format_leaders([ahead, too_few], settings)
    assert "The longest sentences (>=40, 1 sentence) are too few" in text
    assert "On the longest bucket that can be tested (<10, 1 sentence), a is better" in text
    weak = Leader(">=40", 1, "a", "b", 1.0, 0.01, None, "cannot tell: too weak")
    assert "On the longest sentences (>=40, 1 sentence) this cannot tell" in format_leaders([weak], settings)
    assert "(>=40, 2 sentences)" in format_leaders([dataclasses.replace(weak, n=2)], settings)
    sources = ["w1", *(" ".join(VOCAB[:12]) for _ in range(3))]
    evaluation = score_systems({"a": sources}, sources, sources, scoring_settings(bootstrap_samples=10))
    text = format_examples(evaluation, {"a": sources}, sources, sources)
    assert "### <10: sentence 1 (1 source word)" in text and "(12 source words)" in text


def test_tokenize_and_lowercase_change_scores_and_signature(tmp_path: Path) -> None:
    references = ["The cat sat, on the mat.", "A Dog ran home!"] * 5
    hyps = ["the cat sat , on the mat .", "a dog ran home !"] * 5
    ref, hyp = _write(tmp_path / "r", references), _write(tmp_path / "h", hyps)
    argv = ["score", "--ref", str(ref), str(hyp), "--names", "sys", "--set", "evaluation.bootstrap_samples=40"]
    assert main([*argv, "--out", str(tmp_path / "a")]) == 0
    assert main([*argv, "--out", str(tmp_path / "b"), "--set", "evaluation.lowercase=true",
                 "--set", "evaluation.tokenize=intl"]) == 0
    plain = json.loads((tmp_path / "a" / "results.json").read_text())["runs"]["sys"]
    folded = json.loads((tmp_path / "b" / "results.json").read_text())["runs"]["sys"]
    assert plain["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [references]).score)
    expected = sacrebleu.corpus_bleu(hyps, [references], lowercase=True, tokenize="intl").score
    assert folded["bleu"] == pytest.approx(expected) and folded["bleu"] > plain["bleu"]
    assert "case:lc" in folded["signature"] and "tok:intl" in folded["signature"]
    assert "case:mixed" in plain["signature"] and "tok:13a" in plain["signature"]


def test_tokenized_output_is_warned_about_once(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               caplog: pytest.LogCaptureFixture) -> None:
    references = [f"sentence number {i}." for i in range(120)]
    tokenized = [f"sentence number {i} ." for i in range(120)]
    ref = _write(tmp_path / "r", references)
    hyps = [str(_write(tmp_path / f"h{k}", tokenized)) for k in range(3)]
    with caplog.at_level(logging.WARNING):
        assert main(["score", "--ref", str(ref), *hyps, "--buckets", "2,3", "--out", str(tmp_path / "o"),
                     "--baseline", "h0"]) == 0
    err = capsys.readouterr().err
    assert err.count("as tokenized text does") == 1 and "h0, h1, h2" in err
    assert "detokenize" not in caplog.text  # sacrebleu's own warning, once per system and call, is off
    assert main(["score", "--ref", str(ref), *hyps, "--out", str(tmp_path / "o"),
                 "--set", "evaluation.tokenize=none"]) == 0
    assert "tokenized text" not in capsys.readouterr().err


def test_examples_are_reproducible_and_cover_each_non_empty_bucket() -> None:
    rng = random.Random(0)
    sources = [" ".join(rng.choices(VOCAB, k=rng.randint(1, 25))) for _ in range(60)]
    references = [s.replace("w1", "w|1").replace("w2", "<b>w2</b>") for s in sources]
    evaluation = score_systems({"a": references, "b": sources}, sources, references, scoring_settings(bootstrap_samples=10))
    picked = pick_examples(evaluation, sentence_lengths(sources, references, "source"), 2)
    assert [label for label, _ in picked] == ["<10", "[10,20)", "[20,30)"]  # no empty bucket
    assert all(len(indices) == 2 for _, indices in picked)
    assert picked == pick_examples(evaluation, sentence_lengths(sources, references, "source"), 2)
    for label, indices in picked:
        bucket = next(b.bucket for b in evaluation.systems[0].buckets if b.bucket.label == label)
        assert all(bucket.contains(len(sources[i].split())) for i in indices)
    text = format_examples(evaluation, {"a": references, "b": sources}, sources, references)
    first = picked[0][1][0]
    assert f"### <10: sentence {first + 1} ({len(sources[first].split())} source words)" in text
    assert "w|1" not in text and "w\\|1" in text  # a pipe would split the table cell
    # a tag would be drawn as HTML (bold here), or hide the words between < and >
    assert "<b>" not in text and "&lt;b&gt;w2&lt;/b&gt;" in text
    assert plotted_buckets(evaluation) == [0, 1, 2]


def test_the_python_api_needs_only_the_files(
    files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nmt.evaluation.score_files import score_files

    monkeypatch.chdir(tmp_path)
    results = score_files(files["ref"], [files["good"]])  # by reference length, into ./evaluation, as `nmt score`
    assert results["settings"]["by"] == "reference" and (tmp_path / "evaluation" / "report.md").is_file()
    # paths as strings, out_dir None (./evaluation), names stripped as --names strips them
    results = score_files(str(files["ref"]), [str(files["good"])], names=[" good "], out_dir=None)
    assert list(results["runs"]) == ["good"] and (tmp_path / "evaluation" / "good.hyp.txt").is_file()
    with pytest.raises(NMTError, match="no translation file given"):
        score_files(files["ref"], [])


# `nmt score ARGV` in a fresh interpreter; prints, last on stderr, which heavy modules it imported
_SCORE_PROCESS = """
import runpy, sys
sys.argv = ["nmt", "score", *sys.argv[1:]]
try:
    runpy.run_module("nmt", run_name="__main__")
except SystemExit as exit:
    status = exit.code
print("loaded:", *(m for m in ("torch", "matplotlib") if m in sys.modules), file=sys.stderr)
sys.exit(status)
"""


def _score_process(argv: list[str]) -> tuple[int, str, list[str]]:
    """(exit status, stderr, modules of torch and matplotlib loaded) of `nmt score ARGV` in a subprocess."""
    result = subprocess.run([sys.executable, "-c", _SCORE_PROCESS, *argv], capture_output=True, text=True)
    err, _, loaded = result.stderr.rpartition("loaded:")
    return result.returncode, err, loaded.split()


def test_score_loads_no_torch_and_matplotlib_only_for_its_plot(files: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "out"
    options = ["--ref", str(files["ref"]), "--out", str(out), "--set", "evaluation.bootstrap_samples=40"]
    status, err, loaded = _score_process([str(files["poor"]), str(files["good"]), *options])
    assert status == 0, err
    assert loaded == ["matplotlib"] and (out / "bleu_by_length.png").stat().st_size > 1000  # the plot is drawn
    status, err, loaded = _score_process([str(files["poor"]), str(tmp_path / "missing.txt"), *options])
    assert status == 2 and "HYP not found" in err and "Traceback" not in err
    assert loaded == []  # an error, before anything is scored: neither


@pytest.mark.parametrize(("encoding", "bom"), [("utf-16", "FF FE"), ("utf-16-be", "FE FF"), ("utf-32", "FF FE 00 00")])
def test_a_utf16_file_is_named_with_its_iconv_command(
    files: dict[str, Path], tmp_path: Path, encoding: str, bom: str
) -> None:
    hyp = tmp_path / "windows.txt"
    text = files["good"].read_text(encoding="utf-8")
    hyp.write_bytes((text if encoding != "utf-16-be" else "\ufeff" + text).encode(encoding))  # BOM as saved
    result = subprocess.run([sys.executable, "-m", "nmt", "score", str(hyp), "--ref", str(files["ref"]),
                             "--out", str(tmp_path / "o")], capture_output=True, text=True)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    named = "UTF-32" if encoding == "utf-32" else "UTF-16"
    assert f"HYP {hyp} is {named}, not UTF-8 (it starts with {named}'s byte-order mark, {bom})." in result.stderr
    assert f"`iconv -f {named} -t UTF-8 {hyp} > {hyp}.utf8`" in result.stderr and "latin1" not in result.stderr


def test_a_utf8_byte_order_mark_is_not_part_of_the_first_sentence(files: dict[str, Path], tmp_path: Path) -> None:
    marked = tmp_path / "marked.txt"
    marked.write_bytes(b"\xef\xbb\xbf" + files["good"].read_bytes())
    ref = tmp_path / "ref.txt"
    ref.write_bytes(b"\xef\xbb\xbf" + files["ref"].read_bytes())
    argv = ["score", str(files["good"]), str(marked), "--ref", str(ref), "--out", str(tmp_path / "o"),
            "--set", "evaluation.bootstrap_samples=40"]
    assert main(argv) == 0
    runs = json.loads((tmp_path / "o" / "results.json").read_text(encoding="utf-8"))["runs"]
    assert [run["bleu"] for run in runs.values()] == [runs["search"]["bleu"]] * 2


def test_blank_reference_lines_are_warned_about(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    references = files["ref"].read_text(encoding="utf-8").splitlines()
    blank = [2, 7, *range(20, 40)]  # line numbers: 22 of them
    for number in blank:
        references[number - 1] = " " if number == 7 else ""
    ref = _write(tmp_path / "holes.ref", references)
    result = subprocess.run([sys.executable, "-m", "nmt", "score", str(files["good"]), "--ref", str(ref),
                             "--out", str(tmp_path / "o"), "--set", "evaluation.bootstrap_samples=40"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert (f"warning: --ref {ref} has 22 blank lines (lines 2, 7, 20, 21, 22, 23, 24, 25, 26, 27, ...): BLEU "
            "counts every word a system writes for them as wrong") in result.stderr
    assert "chrF leaves them out" in result.stderr
    # what the warning says: BLEU falls against the lines' translations, chrF is the same without them
    hyps = files["good"].read_text(encoding="utf-8").splitlines()
    kept = [i for i in range(len(hyps)) if i + 1 not in blank]
    run = json.loads((tmp_path / "o" / "results.json").read_text(encoding="utf-8"))["runs"]["search"]
    without = ([hyps[i] for i in kept], [[references[i] for i in kept]])
    assert run["bleu"] < sacrebleu.corpus_bleu(*without).score - 5
    assert run["chrf"] == pytest.approx(sacrebleu.corpus_chrf(*without).score)
    capsys.readouterr()
    assert main(["score", str(files["good"]), "--ref", str(files["ref"]), "--out", str(tmp_path / "p")]) == 0
    assert "blank" not in capsys.readouterr().err  # a reference without blank lines: no warning


def test_a_file_given_twice_a_copy_or_the_reference_is_warned_about(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy, ref_copy = tmp_path / "copy.txt", tmp_path / "ref-copy.txt"
    copy.write_bytes(files["good"].read_bytes())
    ref_copy.write_bytes(files["ref"].read_bytes())
    good, poor, ref = str(files["good"]), str(files["poor"]), str(files["ref"])
    argv = ["--ref", ref, "--out", str(tmp_path / "o"), "--set", "evaluation.bootstrap_samples=40"]
    assert main(["score", poor, good, good, str(copy), *argv]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert warnings == [
        f"warning: HYP {good} is given twice (search and search-2): they score alike, +0.00 between them. "
        "Check that each file is the system you meant.",
        f"warning: HYP {good} and {copy} hold the same lines (search and copy): they score alike, +0.00 between "
        "them. Check that each file is the system you meant.",
    ]
    assert main(["score", poor, good, *argv]) == 0
    assert "warning" not in capsys.readouterr().err
    assert main(["score", good, ref, str(ref_copy), "--names", "good,ref,copy", *argv]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert warnings[-2:] == [
        f"warning: HYP {ref} (ref) is --ref itself: it scores as the reference would (BLEU 100). Check that each "
        "file is the system you meant.",
        f"warning: HYP {ref_copy} (copy) holds the lines of --ref {ref}: it scores as the reference would (BLEU "
        "100). Check that each file is the system you meant.",
    ]
    results = json.loads((tmp_path / "o" / "results.json").read_text(encoding="utf-8"))["runs"]
    assert results["ref"]["bleu"] == pytest.approx(100) and results["good"]["bleu"] < 100


@pytest.mark.parametrize(
    ("names", "said"),
    [
        ([], "writes its search.hyp.txt there, and that is HYP (search) {good}"),  # with its line ends changed
        (["--names", "search,encdec"], "writes its search.hyp.txt there, and that is HYP (encdec) {good}"),  # swapped
        (["--names", "report,x"], "writes its report.md there, and that is HYP (x) {report}"),
    ],
)
def test_an_output_that_is_an_input_file_is_refused_before_any_work(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], names: list[str], said: str
) -> None:
    # --out the folder of the files, where a system's NAME.hyp.txt (or report.md) is an input: it was overwritten,
    # by another system's lines where --names swapped them
    (tmp_path / "report.md").write_bytes(files["good"].read_bytes().replace(b"\n", b"\r\n"))
    files["good"].write_bytes((tmp_path / "report.md").read_bytes())
    hyp = tmp_path / "report.md" if "report" in said else files["good"]
    before = {path: path.read_bytes() for path in tmp_path.iterdir()}
    assert main(["score", "--ref", str(files["ref"]), str(files["poor"]), str(hyp), *names, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err == (f"nmt score: error: --out {tmp_path}: nmt score "
                   + said.format(good=files["good"], report=tmp_path / "report.md") + ", which it would overwrite.\n"
                   "Give another --out (or move the input files out of that folder); nothing was written.\n")
    assert {path: path.read_bytes() for path in tmp_path.iterdir()} == before


def test_an_out_folder_reused_holds_only_the_new_reports_systems(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the files an earlier report recorded (results.json's settings.files) and the new one does not write are
    # removed, with a note; the user's files beside them, a link and a file that is an input stay
    out = tmp_path / "out"
    argv = ["--ref", str(files["ref"]), "--out", str(out), "--set", "evaluation.bootstrap_samples=40"]
    assert main(["score", str(files["poor"]), str(files["good"]), "--names", "encdec,search", *argv,
                 "--src", str(files["src"])]) == 0
    assert json.loads((out / "results.json").read_text(encoding="utf-8"))["settings"]["files"] == [
        "results.json", "report.md", "bleu_by_length.png", "src.txt", "ref.txt", "encdec.hyp.txt", "search.hyp.txt"
    ]
    mine = tmp_path / "mine.txt"
    mine.write_text("my own lines\n", encoding="utf-8")
    (out / "search.hyp.txt").unlink()
    (out / "search.hyp.txt").symlink_to(mine)  # the user's link in place of nmt's file
    (out / "notes.txt").write_text("notes\n", encoding="utf-8")
    (out / "other.hyp.txt").write_text("not in the report\n", encoding="utf-8")
    capsys.readouterr()
    assert main(["score", str(files["good"]), "--names", "best", *argv]) == 0
    # src.txt too: the report without --src has no sources, and the earlier one's would pass for its own
    assert capsys.readouterr().err == (f"note: removed src.txt, encdec.hyp.txt from {out}: the report there before "
                                       "wrote them, this one does not.\n")
    assert sorted(p.name for p in out.iterdir()) == [
        "best.hyp.txt", "bleu_by_length.png", "notes.txt", "other.hyp.txt", "ref.txt", "report.md", "results.json",
        "search.hyp.txt",
    ]
    assert mine.read_text(encoding="utf-8") == "my own lines\n" and (out / "search.hyp.txt").is_symlink()
    # best.hyp.txt, which the report in the folder wrote, given as the HYP of another name: kept, not removed
    assert main(["score", str(out / "best.hyp.txt"), "--names", "again", *argv]) == 0
    assert "removed" not in capsys.readouterr().err
    assert (out / "best.hyp.txt").read_bytes() == (out / "again.hyp.txt").read_bytes() == files["good"].read_bytes()
    # a report written before results.json listed its files: the NAME.hyp.txt of each of its settings.runs go
    (out / "results.json").write_text('{"settings": {"runs": {"old": {}, "again": {}}}}', encoding="utf-8")
    (out / "old.hyp.txt").write_text("x\n", encoding="utf-8")
    assert main(["score", str(files["good"]), "--names", "again", *argv]) == 0
    assert capsys.readouterr().err == (f"note: removed old.hyp.txt from {out}: the report there before wrote it, "
                                       "this one does not.\n")
    # the earlier report's src.txt given as this one's --ref (it writes no src.txt): kept
    assert main(["score", str(files["src"]), "--names", "src", "--src", str(files["src"]), *argv]) == 0
    assert main(["score", str(files["good"]), "--names", "again", *argv[2:], "--ref", str(out / "src.txt")]) == 0
    assert "removed src.hyp.txt from" in capsys.readouterr().err and (out / "src.txt").is_file()
    # a results.json that is not a report's, or names no plain file: no nmt report wrote the folder's files,
    # which are refused (the user's own), and nothing is written or removed
    outside = tmp_path / "evil.hyp.txt"
    outside.write_text("x\n", encoding="utf-8")
    for content in ('{"settings": {"runs": {"../evil": {}, ".hidden": {}}}}', "[1, 2]", "not json",
                    '{"settings": {"files": ["../evil.hyp.txt", ".hidden.hyp.txt", "/tmp", 3]}}',
                    '{"settings": {"files": "best.hyp.txt"}}', '{"settings": []}'):
        (out / "results.json").write_text(content, encoding="utf-8")
        (out / ".hidden.hyp.txt").write_text("x\n", encoding="utf-8")
        before = {path.name: path.read_bytes() for path in out.iterdir()}
        assert main(["score", str(files["good"]), "--names", "again", *argv]) == 2
        assert "which no nmt report wrote there" in capsys.readouterr().err
        assert {path.name: path.read_bytes() for path in out.iterdir()} == before
        assert outside.is_file() and (out / ".hidden.hyp.txt").is_file() and (out / "best.hyp.txt").is_file()


def test_two_reports_written_into_one_folder_at_once_are_written_one_after_the_other(
    files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two `nmt score --out OUT` at once: each wrote its files while the other wrote its own, and the folder kept
    one's translations beside the other's results.json (which the next report then refused as the user's files).
    The second waits for the first, then replaces its report whole."""
    out = tmp_path / "out"
    write, written = report_folder.atomic_write_files, []

    def slow_write(folder: Path, contents: dict[str, bytes]) -> None:
        written.append(folder)
        time.sleep(1.0)  # long enough for the other to arrive while this one writes
        write(folder, contents)

    monkeypatch.setattr(report_folder, "atomic_write_files", slow_write)
    threads = [threading.Thread(target=score_files, args=(files["ref"], [files[key]], None, [key], out),
                                kwargs={"overrides": ["evaluation.bootstrap_samples=40"]}) for key in ("poor", "good")]
    for thread in threads:
        thread.start()
        time.sleep(0.2)
    for thread in threads:
        thread.join(timeout=120)
    assert len(written) == 2 and "waiting for another report to be written into" in capsys.readouterr().err
    listed = json.loads((out / "results.json").read_text(encoding="utf-8"))["settings"]["files"]
    assert sorted(p.name for p in out.iterdir()) == sorted(listed) and "good.hyp.txt" in listed


def test_a_report_file_edited_since_is_kept_when_a_new_report_drops_it(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the earlier report's NAME.hyp.txt that the user has edited since (post-processed, say) is their work now:
    # kept, with a note; the one left as it was is removed as before
    out = tmp_path / "out"
    argv = ["--ref", str(files["ref"]), "--out", str(out), "--set", "evaluation.bootstrap_samples=40"]
    assert main(["score", str(files["poor"]), str(files["good"]), "--names", "encdec,search", *argv]) == 0
    recorded = json.loads((out / "results.json").read_text(encoding="utf-8"))["settings"]["text_sha256"]
    assert sorted(recorded) == ["encdec.hyp.txt", "ref.txt", "search.hyp.txt"]
    assert recorded["search.hyp.txt"] == hashlib.sha256((out / "search.hyp.txt").read_bytes()).hexdigest()
    edited = (out / "encdec.hyp.txt").read_text(encoding="utf-8").replace("\n", " (checked)\n", 1)
    (out / "encdec.hyp.txt").write_text(edited, encoding="utf-8")
    capsys.readouterr()
    assert main(["score", str(files["good"]), "--names", "best", *argv]) == 0
    assert capsys.readouterr().err == (
        f"note: removed search.hyp.txt from {out}: the report there before wrote it, this one does not.\n"
        f"note: kept encdec.hyp.txt in {out}: the report there before wrote it, but it has changed since; this "
        "report does not use or list it.\n"
    )
    assert (out / "encdec.hyp.txt").read_text(encoding="utf-8") == edited and not (out / "search.hyp.txt").exists()
    # the new report does not list it, so a third report leaves it alone and says nothing of it
    assert main(["score", str(files["poor"]), "--names", "worst", *argv]) == 0
    assert "encdec" not in capsys.readouterr().err and (out / "encdec.hyp.txt").read_text(encoding="utf-8") == edited


def test_a_ctrl_c_while_the_report_is_written_leaves_the_new_report_whole(
    files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ctrl-C as the report's files are written waits for all of them and for the removal of the earlier report's:
    # no file is left that no report names, and none named is missing
    out = tmp_path / "out"
    argv = ["--ref", str(files["ref"]), "--out", str(out), "--set", "evaluation.bootstrap_samples=40"]
    assert main(["score", str(files["poor"]), "--names", "encdec", *argv]) == 0
    write_files = report_folder.atomic_write_files

    def interrupted(folder: Path, contents: dict[str, bytes]) -> None:
        signal.raise_signal(signal.SIGINT)
        write_files(folder, contents)

    monkeypatch.setattr(report_folder, "atomic_write_files", interrupted)
    assert main(["score", str(files["good"]), "--names", "search", *argv]) == 130
    listed = json.loads((out / "results.json").read_text(encoding="utf-8"))["settings"]["files"]
    assert sorted(p.name for p in out.iterdir()) == sorted(listed)
    assert "search.hyp.txt" in listed and not (out / "encdec.hyp.txt").exists()


def test_an_out_folder_that_cannot_be_written_is_refused_before_any_work(
    files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # refused before scoring (nmt evaluate: before translating), not on the report's first write
    (tmp_path / "ro").mkdir()
    unwritable(monkeypatch, tmp_path / "ro")
    for out, where in ((tmp_path / "ro", "it"), (tmp_path / "ro" / "new", f"{tmp_path / 'ro'}, where it would be made,")):
        assert main(["score", "--ref", str(files["ref"]), str(files["good"]), "--out", str(out)]) == 2
        assert capsys.readouterr() == ("", f"nmt score: error: --out {out}: {where} cannot be written (no permission to "
                                       "write there, or a read-only disk).\nGive --out a folder you can write; nothing "
                                       "was done.\n")
    assert list((tmp_path / "ro").iterdir()) == []


def test_a_folder_of_the_user_s_own_files_is_refused(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # no nmt report wrote this folder's results.json and search.hyp.txt: nmt score replaces neither
    out = tmp_path / "mine"
    out.mkdir()
    for name in ("results.json", "search.hyp.txt"):
        (out / name).write_text("mine\n", encoding="utf-8")
    assert main(["score", str(files["good"]), "--ref", str(files["ref"]), "--out", str(out)]) == 2
    assert f"--out {out} holds results.json, search.hyp.txt, which no nmt report wrote there" in capsys.readouterr().err
    assert {path.name: path.read_text(encoding="utf-8") for path in out.iterdir()} == {
        "results.json": "mine\n", "search.hyp.txt": "mine\n"}


def test_a_report_cut_short_by_a_full_disk_is_no_foreign_folder_to_the_next(
    files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # the report's files are written all or none: a disk that fills up at the plot or at ref.txt leaves the
    # earlier report whole (no list naming files not written, no files of two reports), and the same command, run
    # again, writes its own
    out = tmp_path / "out"
    common = ["--ref", str(files["ref"]), "--out", str(out), "--set", "evaluation.bootstrap_samples=40"]
    assert main(["score", str(files["poor"]), "--names", "encdec", *common]) == 0
    earlier = {path.name: path.read_bytes() for path in out.iterdir()}
    argv = ["score", str(files["good"]), "--names", "search", *common]
    real_open = fileio.atomic_open

    for full in ("bleu_by_length.png", "ref.txt"):
        @contextlib.contextmanager
        def filling(path: str | Path, mode: str = "w", full: str = full) -> Iterator[IO]:
            with real_open(path, mode) as handle:
                if Path(path).name == full:
                    raise OSError(28, "No space left on device", str(path))
                yield handle

        with monkeypatch.context() as patched:
            patched.setattr(fileio, "atomic_open", filling)
            assert main(argv) == 2
        assert f"could not write {out / full}" in capsys.readouterr().err
        assert {path.name: path.read_bytes() for path in out.iterdir()} == earlier
    assert main(argv) == 0
    assert (out / "ref.txt").read_bytes() == files["ref"].read_bytes()
    assert sorted(path.name for path in out.iterdir()) == sorted(
        json.loads((out / "results.json").read_text(encoding="utf-8"))["settings"]["files"])


def test_the_longest_answer_says_a_pair_is_too_weak_even_where_its_bucket_is_too_small_to_test() -> None:
    """Too weak and too few at once: the weakness is the answer (the sentences would not help)."""
    settings = config_from_dict({}).evaluation
    weak = "cannot tell: a (under 1: too weak for its buckets to show anything)"
    tested = Leader("[10,20)", 100, "b", "a", 0.8, 0.01, None, weak)
    for p in (0.01, None):  # the longest bucket tested, or too small to resample
        answer = _longest_answer([tested, Leader(">=20", 5, "b", "a", 0.5, p, None, weak)], settings)
        assert answer == ("On the longest sentences (>=20, 5 sentences) this cannot tell: a (under 1: too weak for its "
                          "buckets to show anything); a BLEU this low chooses by noise, whatever its p.")
    few = _longest_answer([Leader("[10,20)", 100, "b", "a", 2.0, 0.001, True), Leader(">=20", 5, "b", "a", 0.5, None,
                                                                                      None, TOO_FEW)], settings)
    assert few.startswith("The longest sentences (>=20, 5 sentences) are too few to test")
    assert few.endswith("On the longest bucket that can be tested ([10,20), 100 sentences), b is better: +2.00 BLEU "
                        "over a (p=0.001).")
