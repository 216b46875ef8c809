"""Reports: results.json schema, the Markdown and terminal tables, the PNG plot."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

import matplotlib.image
import pytest

from nmt.evaluation.length_plot import bleu_by_length_figure, line_styles
from nmt.evaluation.metrics import METRICS
from nmt.evaluation.report import format_markdown, format_table, report_contents, results_dict
from nmt.evaluation.scoring import Evaluation, score_systems
from nmt.fileio import atomic_write_files
from tests.helpers import scoring_settings

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def write_report(evaluation: Evaluation, out_dir: Path, **parts: Any) -> dict[str, Any]:
    """The report's files (`report_contents`) written into `out_dir` as score and evaluate write them; results.json's
    content."""
    results, contents = report_contents(evaluation, **parts)
    atomic_write_files(out_dir, contents)
    return results


def evaluation_inputs() -> tuple[dict[str, list[str]], list[str], list[str]]:
    """Two systems on 120 sentences of 1..45 words: the `[50,60)` and `>=60` buckets are empty."""
    rng = random.Random(0)
    sources = [" ".join(f"w{rng.randrange(100)}" for _ in range(rng.randint(1, 45))) for _ in range(120)]
    references = [" ".join(reversed(s.split())) for s in sources]
    good = [" ".join(w if rng.random() < 0.8 else "x" for w in r.split()) for r in references]
    poor = [" ".join(w if rng.random() < 0.4 else "x" for w in r.split()) for r in references]
    return {"rnnsearch": good, "rnnencdec": poor}, sources, references


@pytest.fixture(scope="module")
def evaluation() -> Evaluation:
    return score_systems(*evaluation_inputs(), scoring_settings(bootstrap_samples=100))


def test_results_json_schema(evaluation: Evaluation, tmp_path: Path) -> None:
    returned = write_report(evaluation, tmp_path / "out", extra_settings={"beam_size": 5})
    results = json.loads((tmp_path / "out" / "results.json").read_text(encoding="utf-8"))
    assert results == returned == results_dict(evaluation, {"beam_size": 5})
    assert set(results) == {"runs", "comparisons", "settings"}
    assert list(results["runs"]) == ["rnnsearch", "rnnencdec"]
    run = results["runs"]["rnnsearch"]
    statistics = {"length_ratio", "precisions", "floor"}  # Bleu.statistics()
    # chrF by bucket, as every metric of METRICS other than BLEU: prefixed keys (a new metric adds its own)
    chrf = {f"{name}{suffix}" for name in METRICS if name != "bleu" for suffix in ("", "_ci", "_floor")}
    assert "chrf_floor" in chrf
    signatures = {f"{name}_signature" for name in METRICS if name != "bleu"}
    assert set(run) == {"bleu", "signature", "n", "ci", "buckets"} | signatures | statistics | chrf
    assert run["n"] == 120 and run["ci"][0] < run["bleu"] < run["ci"][1]
    assert run["signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp")
    labels = [b["label"] for b in run["buckets"]]
    assert labels == ["<10", "[10,20)", "[20,30)", "[30,40)", "[40,50)", "[50,60)", ">=60"]
    for bucket in run["buckets"]:
        assert set(bucket) == {"label", "low", "high", "n", "bleu", "ci"} | statistics | chrf
    assert (run["buckets"][0]["low"], run["buckets"][0]["high"]) == (0, 10)
    assert (run["buckets"][1]["low"], run["buckets"][1]["high"]) == (10, 20)
    assert (run["buckets"][-1]["low"], run["buckets"][-1]["high"]) == (60, None)
    assert run["buckets"][-1] == {"label": ">=60", "low": 60, "high": None, "n": 0, "bleu": None, "ci": None,
                                  "length_ratio": None, "precisions": None, "floor": None, **dict.fromkeys(chrf)}
    assert sum(b["n"] for b in run["buckets"]) == 120
    (comparison,) = results["comparisons"]
    differences = {f"{name}{suffix}" for name in METRICS if name != "bleu" for suffix in ("_diff", "_p")}
    assert set(comparison) == {"a", "b", "bleu_diff", "p", "buckets"} | differences and "chrf_p" in differences
    assert (comparison["a"], comparison["b"]) == ("rnnsearch", "rnnencdec")
    assert comparison["bleu_diff"] == pytest.approx(results["runs"]["rnnencdec"]["bleu"] - run["bleu"])
    assert comparison["bleu_diff"] < 0 and comparison["p"] < 0.05
    assert [set(b) for b in comparison["buckets"]] == [{"label", "bleu_diff", "p"} | differences] * 7
    assert comparison["buckets"][-1] == {"label": ">=60", "bleu_diff": None, "p": None, **dict.fromkeys(differences)}
    settings = results["settings"]
    assert settings["buckets"] == [10, 20, 30, 40, 50, 60] and settings["by"] == "source"
    assert (settings["bootstrap_samples"], settings["bootstrap_seed"]) == (100, 12345)
    assert settings["bleu_diff"] == "b - a" and settings["beam_size"] == 5
    # the thresholds behind the checks' and the leaders' verdicts in the same file
    assert (settings["min_bucket_sentences"], settings["significance"], settings["long_words"]) == (1, 0.05, 40)
    assert (settings["fixed_vector_max_ratio"], settings["attention_min_ratio"]) == (0.5, 0.75)
    assert (settings["ahead_from_words"], settings["flat_from_ceiling"]) == (20, 50)


def test_terminal_table(evaluation: Evaluation) -> None:
    table = format_table(evaluation)
    lines = table.splitlines()
    assert lines[0].split() == ["bucket", "n", "rnnsearch", "BLEU", "[CI]", "rnnencdec", "BLEU", "[CI]",
                                "rnnencdec", "-", "rnnsearch", "(p)"]
    search, encdec = evaluation.systems
    all_row = next(line for line in lines if line.startswith("all "))
    assert f"{search.bleu:.2f} [{search.ci[0]:.2f}, {search.ci[1]:.2f}]" in all_row
    assert f"{evaluation.comparisons[0].bleu_diff:+.2f} (p=" in all_row
    empty_row = next(line for line in lines if line.startswith(">=60"))
    assert empty_row.split() == [">=60", "0", "-", "-", "-"]
    assert f"chrF rnnencdec: {encdec.chrf:.2f}" in table


def test_markdown_report(evaluation: Evaluation) -> None:
    markdown = format_markdown(evaluation)
    rows = [line for line in markdown.splitlines() if line.startswith("| ")]
    assert rows[0] == "| bucket | n | rnnsearch BLEU [CI] | rnnencdec BLEU [CI] | rnnencdec - rnnsearch (p) |"
    bucket_rows = rows[1:9]
    assert [r.split(" | ")[0] for r in bucket_rows] == [
        "| <10", "| [10,20)", "| [20,30)", "| [30,40)", "| [40,50)", "| [50,60)", "| >=60", "| all"
    ]
    assert bucket_rows[-1].split(" | ")[1] == "120"
    assert evaluation.systems[0].signature in markdown
    assert evaluation.systems[0].chrf_signature in markdown
    assert f"| rnnsearch | {evaluation.systems[0].chrf:.2f} |" in markdown


def test_the_statistics_section_shows_each_declared_statistic_and_a_new_one_is_one_declaration(
    evaluation: Evaluation, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nmt.evaluation import metrics, scoring

    def section(markdown: str, run: str) -> list[str]:
        lines = markdown.split(f"### {run}\n\n", 1)[1].splitlines()
        return lines[: lines.index("") if "" in lines else len(lines)]

    table = section(format_markdown(evaluation), "rnnsearch")
    assert table[0] == "| bucket | n | BLEU | floor | length ratio | p1 | p2 | p3 | p4 |"
    whole = evaluation.systems[0]
    floor, ratio, precisions = (whole.statistics[name].values for name in ("floor", "length_ratio", "precisions"))
    assert table[-1] == (f"| all | 120 | {whole.bleu:.2f} | {floor[0]:.2f} | {ratio[0]:.2f} | "
                         + " | ".join(f"{p:.1f}" for p in precisions) + " |")
    assert table[-2] == "| >=60 | 0 | - | - | - | - | - | - | - |"

    hyp_tokens = scoring.BucketStatistic("hyp_tokens", ("hyp tokens",), lambda stats, floor: stats[..., :1],
                                         "tokens output.", digits=0, bootstraps=True)
    monkeypatch.setattr(metrics.Bleu, "extra_statistics", (*metrics.Bleu.extra_statistics, hyp_tokens))
    sentences = evaluation_inputs()
    extended = score_systems(*sentences, scoring_settings(bootstrap_samples=100))
    table = section(format_markdown(extended), "rnnsearch")
    assert table[0].endswith("| p4 | hyp tokens |") and "**hyp tokens**: tokens output." in format_markdown(extended)
    value = extended.systems[0].statistics["hyp_tokens"]
    low, high = value.intervals[0]
    assert table[-1].endswith(f"| {value.values[0]:.0f} [{low:.0f}, {high:.0f}] |")
    run = results_dict(extended)["runs"]["rnnsearch"]
    assert (run["hyp_tokens"], run["hyp_tokens_ci"]) == (value.values[0], [low, high])
    assert run["buckets"][-1]["hyp_tokens"] is None and run["buckets"][-1]["hyp_tokens_ci"] is None


def test_plot_is_a_valid_png(evaluation: Evaluation, tmp_path: Path) -> None:
    write_report(evaluation, tmp_path)
    png = tmp_path / "bleu_by_length.png"
    assert png.read_bytes()[:8] == PNG_MAGIC
    image = matplotlib.image.imread(png)
    assert image.shape[0] > 200 and image.shape[1] > 400
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bleu_by_length.png", "report.md", "results.json"]


def test_system_names_are_drawn_and_tabled_as_written(tmp_path: Path) -> None:
    """Names a user may give (--names, run folders): '$' pairs were read as mathematics ('$^$' failed to draw after
    results.json and report.md were written), a leading '_' left the system out of the legend, and a '|' split
    its table cells."""
    systems, sources, references = evaluation_inputs()
    names = {"rnnsearch": "a$^$b", "rnnencdec": "_base|line"}
    named = score_systems({names[n]: hyps for n, hyps in systems.items()}, sources, references,
                          scoring_settings(bootstrap_samples=100))
    figure = bleu_by_length_figure(named, title="costs $5 or $6")
    legend = [text.get_text() for text in figure.axes[0].get_legend().get_texts()]
    assert [label.split(" (all: ")[0] for label in legend] == ["a$^$b", "_base|line", "source-blind floor (wrong source)"]
    write_report(named, tmp_path, title="costs $5 or $6")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bleu_by_length.png", "report.md", "results.json"]
    markdown = (tmp_path / "report.md").read_text(encoding="utf-8")
    tables = [block.splitlines() for block in re.split(r"\n(?!\|)[^\n]*\n?", markdown) if block.startswith("|")]
    cells = "\n".join(row for table in tables for row in table)
    assert "_base\\|line" in cells and "_base|line" not in cells.replace("\\|", "")
    for table in tables:  # every row has its header's cells
        assert {len(re.split(r"(?<!\\)\|", row)) for row in table} == {len(re.split(r"(?<!\\)\|", table[0]))}


def test_plot_lines_are_figure_2s_colour_per_model_and_style_per_ceiling_or_a_colour_per_run() -> None:
    figure_2 = {"e30": ("RNNencdec", "-30"), "s30": ("RNNsearch", "-30"), "e50": ("RNNencdec", "-50"),
                "s50": ("RNNsearch", "-50")}
    assert line_styles(list(figure_2), figure_2) == {
        "e30": ("C0", "-"), "s30": ("C1", "-"), "e50": ("C0", "--"), "s50": ("C1", "--"),
    }
    # dot attention at d 128 and 1024, both on all lengths: one group, so a colour each (both were C0 "-")
    same = {"dot-128": ("dot attention", "all lengths"), "dot-1024": ("dot attention", "all lengths")}
    assert line_styles(list(same), same) == {"dot-128": ("C0", "-"), "dot-1024": ("C1", "-")}
    assert line_styles(["a", "b"], None) == {"a": ("C0", "-"), "b": ("C1", "-")}
    # five ceilings of one model: the fifth style would be the first's again, so a colour per run
    ceilings = {f"s{w}": ("RNNsearch", f"-{w}") for w in (10, 20, 30, 40, 50)}
    assert len(set(line_styles(list(ceilings), ceilings).values())) == 5
    many = [f"run{i}" for i in range(12)]
    assert len(set(line_styles(many, None).values())) == 12 and line_styles(many, None)["run10"] == ("C0", "--")


def test_single_system_has_no_comparisons(evaluation: Evaluation, tmp_path: Path) -> None:
    single = Evaluation([evaluation.systems[0]], [], evaluation.settings)
    write_report(single, tmp_path)
    results = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert results["comparisons"] == []
    assert format_table(single).splitlines()[0].split() == ["bucket", "n", "rnnsearch", "BLEU", "[CI]"]


def test_small_buckets_show_a_dash_for_interval_and_p_in_table_json_and_plot(tmp_path: Path) -> None:
    from nmt.evaluation.report import format_table

    sources = ["a b c"] + [" ".join(["w"] * 15)] * 60
    references = list(sources)
    hyps = {"x": ["a b"] + references[1:], "y": references}
    evaluation = score_systems(hyps, sources, references, scoring_settings(bootstrap_samples=50, min_bucket_sentences=50))
    text = format_table(evaluation)
    small = next(line for line in text.splitlines() if line.startswith("<10"))
    assert "[-]" in small and "(p -)" in small and "p=" not in small
    big = next(line for line in text.splitlines() if line.startswith("[10,20)"))
    assert "p=" in big
    results = write_report(evaluation, tmp_path)
    bucket = results["runs"]["x"]["buckets"][0]
    assert bucket["n"] == 1 and bucket["bleu"] is not None and bucket["ci"] is None
    assert results["comparisons"][0]["buckets"][0]["p"] is None
    assert (tmp_path / "bleu_by_length.png").stat().st_size > 0
    # fewer sentences in all than the rule asks: the all row gets its dashes too
    few = score_systems(hyps, sources, references, scoring_settings(bootstrap_samples=50, min_bucket_sentences=100))
    assert next(line for line in format_table(few).splitlines() if line.startswith("all")).endswith("(p -)")
    results = write_report(few, tmp_path)
    assert results["runs"]["x"]["ci"] is None and results["comparisons"][0]["p"] is None


def test_chrf_by_bucket_follows_the_bleu_material_in_report_table_and_json(evaluation: Evaluation) -> None:
    markdown = format_markdown(evaluation)
    assert markdown.index("## What each score is made of") < markdown.index("## chrF by sentence length")
    section = markdown.split("## chrF by sentence length\n", 1)[1].split("\n## ", 1)[0]  # to the next metric's
    search = evaluation.systems[0]
    chrf = search.metrics["chrf"]
    assert chrf.value == search.chrf and chrf.ci is not None
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    assert rows[0] == "| bucket | n | rnnsearch chrF [CI] | rnnencdec chrF [CI] | rnnencdec - rnnsearch (p) |"
    (comparison,) = evaluation.comparisons
    diff = comparison.metrics["chrf"]
    assert rows[8].startswith(f"| all | 120 | {chrf.value:.2f} [{chrf.ci[0]:.2f}, {chrf.ci[1]:.2f}] | ")
    assert rows[8].endswith(f" | {diff.diff:+.2f} (p={diff.p:.3f}) |")
    assert rows[7] == "| >=60 | 0 | - | - | - |"
    assert rows[9] == "| bucket | n | rnnsearch floor | rnnencdec floor |"
    assert rows[-1] == f"| all | 120 | {chrf.statistics['floor'].values[0]:.2f} | " \
                       f"{evaluation.systems[1].metrics['chrf'].statistics['floor'].values[0]:.2f} |"
    table = format_table(evaluation).splitlines()
    assert table[table.index("") + 4].split()[:5] == ["bucket", "n", "rnnsearch", "chrF", "[CI]"]
    run = results_dict(evaluation)["runs"]["rnnsearch"]
    assert (run["chrf"], run["chrf_ci"], run["chrf_floor"]) == (chrf.value, list(chrf.ci),
                                                               chrf.statistics["floor"].values[0])
    bucket = evaluation.systems[0].buckets[1].metrics["chrf"]
    assert run["buckets"][1]["chrf"] == bucket.value and run["buckets"][1]["chrf_ci"] == list(bucket.ci)


def test_a_new_metric_by_bucket_is_one_class_and_one_registry_line(
    evaluation: Evaluation, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A throwaway metric, the share of outputs equal to their reference, scored by bucket with intervals and
    paired p-values, in results.json, report.md and the terminal, and BLEU's numbers untouched by it."""
    import numpy as np

    from nmt.evaluation.metrics import Metric

    class ExactMatch(Metric):
        name, label, width = "exact", "exact match", 2

        def __init__(self, references: list[str], tokenize: str, lowercase: bool) -> None:
            super().__init__(references, tokenize, lowercase)
            self.references = references

        @property
        def signature(self) -> str:
            return "exact:1"

        def _sentence_stats(self, hypotheses: list[str]) -> np.ndarray:
            return np.array([[h == r, 1] for h, r in zip(hypotheses, self.references, strict=True)])

        @classmethod
        def score(cls, stats: np.ndarray) -> np.ndarray:
            return 100.0 * stats[..., 0] / stats[..., 1]

    monkeypatch.setitem(METRICS, "exact", ExactMatch)  # the registry line
    hypotheses, sources, references = evaluation_inputs()
    good = hypotheses["rnnsearch"]
    hypotheses["rnnsearch"] = [reference if i % 3 else good[i] for i, reference in enumerate(references)]
    extended = score_systems(hypotheses, sources, references, scoring_settings(bootstrap_samples=100))
    monkeypatch.delitem(METRICS, "exact")
    without = score_systems(hypotheses, sources, references, scoring_settings(bootstrap_samples=100))
    for system, before in zip(extended.systems, without.systems, strict=True):  # BLEU (and chrF) as without it
        assert (system.bleu, system.ci, system.statistics, system.chrf) == (before.bleu, before.ci, before.statistics,
                                                                         before.chrf)
        assert [(b.bleu, b.ci, b.statistics) for b in system.buckets] == [(b.bleu, b.ci, b.statistics)
                                                                          for b in before.buckets]
    assert [(c.bleu_diff, c.p) for c in extended.comparisons] == [(c.bleu_diff, c.p) for c in without.comparisons]
    search = extended.systems[0]
    exact = [h == r for h, r in zip(hypotheses["rnnsearch"], references, strict=True)]
    for bucket in search.buckets:
        rows = [i for i, s in enumerate(sources) if bucket.bucket.contains(len(s.split()))]
        score = bucket.metrics["exact"]
        if not rows:
            assert (score.value, score.ci) == (None, None)
            continue
        assert score.value == pytest.approx(100.0 * sum(exact[i] for i in rows) / len(rows))
        assert score.ci is not None and score.ci[0] <= score.value <= score.ci[1]
        assert "floor" in score.statistics
    diff = extended.comparisons[0].metrics["exact"]
    assert diff.diff < -50 and diff.p < 0.05  # rnnencdec matches no reference
    monkeypatch.setitem(METRICS, "exact", ExactMatch)
    results = write_report(extended, tmp_path)
    run = results["runs"]["rnnsearch"]
    assert (run["exact"], run["exact_ci"], run["exact_signature"]) == (search.metrics["exact"].value,
                                                                        list(search.metrics["exact"].ci), "exact:1")
    assert run["buckets"][0]["exact"] == search.buckets[0].metrics["exact"].value
    assert (results["comparisons"][0]["exact_diff"], results["comparisons"][0]["exact_p"]) == (diff.diff, diff.p)
    markdown = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert markdown.index("## chrF by sentence length") < markdown.index("## exact match by sentence length")
    assert "| bucket | n | rnnsearch exact match [CI] | rnnencdec exact match [CI] |" in markdown
    assert "rnnsearch exact match [CI]" in format_table(extended)
