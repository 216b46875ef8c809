"""nmt/analysis/attention_report.py: the Markdown and figures of attention-checks and attention-scaling from
their results (the commands, with runs: tests/test_attention_checks.py, tests/test_attention_scaling.py)."""

from __future__ import annotations

import math
from typing import Any

from nmt.analysis.attention_report import (
    ABLATION_NOTES,
    ALIGNMENT_NOTES,
    CAVEAT_NOTES,
    PERTURBATION_NOTES,
    checks_figure,
    format_checks_markdown,
    format_scaling_markdown,
    scaling_figure,
)


def _results(entry: dict[str, Any]) -> dict[str, Any]:
    return {"test_set": "test split of data/x", "sentences": 3, "selection": "all", "by": "source",
            "decoding": "greedy", "seed": 1, "symmetrisation": "intersection",
            "n": {"<10": 2, "[10,20)": 0, ">=20": 1}, "runs": {"search": {"run_dir": "runs/search",
            "checkpoint": "best.pt", **entry}}}


PERTURBATION = {"none": {"bleu": {"<10": 20.0, "[10,20)": None, ">=20": 10.5}, "all": 15.25},
                "uniform": {"bleu": {"<10": 5.0, "[10,20)": None, ">=20": None}, "all": 4.0}}
POINT = {"checkpoint": "best.pt", "step": 600,
         "all": {"agreement": 0.5, "chance": 0.25, "diagonal": 0.125, "argmax_on_eos": 0.0,
                 "target_words": 40},
         "buckets": {"<10": {"agreement": 0.75, "chance": 0.3, "diagonal": 0.2},
                     "[10,20)": {"agreement": None, "chance": None, "diagonal": None},
                     ">=20": {"agreement": None, "chance": None, "diagonal": None}}}


def test_the_tables_show_the_non_empty_buckets_with_a_dash_for_no_score() -> None:
    markdown = format_checks_markdown(_results({"perturbation": PERTURBATION, "alignment": [POINT]}))
    assert "| attention | <10 (n=2) | >=20 (n=1) | all (n=3) |" in markdown  # the empty bucket left out
    assert "| none | 20.00 | 10.50 | 15.25 |" in markdown and "| uniform | 5.00 | - | 4.00 |" in markdown
    assert "| best.pt (step 600) | 75.0% | - | 50.0% | 25.0% | 12.5% | 0.0% | 40 |" in markdown
    assert all(note in markdown for note in (*PERTURBATION_NOTES, *CAVEAT_NOTES, *ALIGNMENT_NOTES))
    assert not any(note in markdown for note in ABLATION_NOTES)


def test_sentences_the_agreement_leaves_out_are_counted_under_its_table() -> None:
    # the header's n is the test set's; the agreement covers only the pairs whose words it could read
    skipped = {**POINT, "all": {**POINT["all"], "skipped_sentences": 1}}
    markdown = format_checks_markdown({**_results({"alignment": [skipped]}), "batch_size": 16})
    assert "1 sentence of 3 left out: a side empty, or its pieces do not make up its whitespace words" in markdown
    assert "Permutation seed 1 at batch size 16;" in markdown
    assert "left out" not in format_checks_markdown(_results({"alignment": [POINT]}))


def test_only_the_notes_of_the_checks_that_ran() -> None:
    markdown = format_checks_markdown(_results({"alignment": [POINT]}))
    assert "BLEU with the attention weights replaced" not in markdown
    assert not any(note in markdown for note in (*PERTURBATION_NOTES, *CAVEAT_NOTES))
    assert all(note in markdown for note in ALIGNMENT_NOTES)


def test_the_figure_has_a_row_per_run_and_the_chance_line() -> None:
    figure = checks_figure(_results({"perturbation": PERTURBATION, "alignment": [POINT]}))
    left, right = figure.axes
    assert [line.get_label() for line in left.get_lines()] == ["none", "uniform"]
    assert [line.get_label() for line in right.get_lines()] == ["best (step 600)", "diagonal", "chance"]
    agreement = list(right.get_lines()[0].get_ydata())  # in %; a bucket without a linked word is no point, not 0%
    assert agreement[0] == 75.0 and math.isnan(agreement[1])


def _scaling_results() -> dict[str, Any]:
    stats = {"score_variance": 1234.5, "max_weight": 0.9512, "saturated_share": 0.8, "entropy_ratio": 0.1234,
             "score_grad_norm": 0.00123, "loss_per_token": 2.5}
    return {"sentences": "sample of the test split of data/x, 3 sentences", "saturated_above": 0.9, "runs": {
        name: {"attention": kind, "attention_size": size, "step": 900, "trained": stats,
               "initialisation": {**stats, "score_variance": 0.5}}
        for name, kind, size in
        (("dot-128", "dot", 128), ("dot-1024", "dot", 1024), ("scaled-128", "scaled_dot", 128))
    }}


def test_the_scaling_table_has_a_row_per_run_and_moment_and_names_the_runs_threshold() -> None:
    markdown = format_scaling_markdown(_scaling_results())
    assert "\n\nTeacher-forced on a sample of the test split of data/x, 3 sentences; means over decoder steps" in markdown
    assert "| when | score variance | mean largest weight | steps with largest weight > 0.9 |" in markdown
    assert "| dot-128 | dot | 128 | init | 0.5 | 0.951 | 80.0% | 0.123 | 0.00123 | 2.500 |" in markdown
    assert "| dot-128 | dot | 128 | step 900 | 1.23e+03 |" in markdown
    assert markdown.count("| scaled-128 |") == 2


def test_a_transformer_s_scaling_gets_a_row_per_layer_head_and_moment() -> None:
    results = _scaling_results()
    run = results["runs"]["scaled-128"]
    run["parts"] = {part: {"trained": run["trained"], "initialisation": run["initialisation"]}
                    for part in ("layer 1 head 1", "layer 1")}
    markdown = format_scaling_markdown(results)
    assert "scaled-128, per decoder layer and cross-attention head:" in markdown
    assert "| layer 1 head 1 | init | 0.5 | 0.951 |" in markdown and "| layer 1 | step 900 | 1.23e+03 |" in markdown
    assert "dot-128, per decoder layer" not in markdown


def test_the_scaling_figure_plots_each_statistic_against_d_per_kind() -> None:
    panels = scaling_figure(_scaling_results()).axes
    assert [axes.get_title() for axes in panels] == [
        "score variance", "mean largest weight", "entropy / uniform", "gradient norm at the softmax's input"]
    assert [axes.get_yscale() for axes in panels] == ["log", "linear", "linear", "log"]
    dot_trained = panels[0].get_lines()[0]
    assert dot_trained.get_label() == "dot, trained" and list(dot_trained.get_xdata()) == [128, 1024]
    assert panels[0].get_xlabel() == "d (attention_size; general: hidden_size; a Transformer's d_k per head)"


def test_the_scaling_figure_draws_every_attention_kind_in_a_colour_of_its_own() -> None:
    results = _scaling_results()
    kinds = ("additive", "dot", "general", "scaled_dot", "dot (Transformer)", "scaled_dot (Transformer)")
    template = results["runs"]["dot-128"]
    results["runs"] = {kind: {**template, "attention": kind} for kind in kinds}
    lines = scaling_figure(results).axes[0].get_lines()
    assert sorted({line.get_label().removesuffix(", trained") for line in lines[::2]}) == sorted(kinds)
    assert len({line.get_color() for line in lines}) == len(kinds)


def _head(agreement: float | None) -> dict[str, Any]:
    bucket = {"agreement": agreement, "chance": 0.25, "diagonal": 0.1}
    return {"all": {**bucket, "argmax_on_eos": 0.0, "target_words": 40},
            "buckets": {"<10": bucket, "[10,20)": {**bucket, "agreement": None}, ">=20": bucket}}


HEADS = {f"layer {layer} {column}": _head(value) for layer, row in ((1, (0.1, 0.2, 0.15)), (2, (0.9, None, 0.5)))
         for column, value in zip(("head 1", "head 2", "mean"), row, strict=True)}


def test_a_transformer_s_heads_are_a_layers_by_heads_table_and_heatmap() -> None:
    results = _results({"alignment": [{**POINT, "heads": HEADS}]})
    markdown = format_checks_markdown(results)
    assert "| layer | head 1 | head 2 | mean |" in markdown
    assert "| layer 1 | 10.0% | 20.0% | 15.0% |" in markdown and "| layer 2 | 90.0% | - | 50.0% |" in markdown
    assert "| layer 2 head 1 | 90.0% | 90.0% | 90.0% |" in markdown  # by bucket: <10, >=20, all
    axes = checks_figure(results).axes[0]
    assert axes.get_title().startswith("search: argmax agrees with eflomal, per head")
    assert [t.get_text() for t in axes.texts] == ["10", "20", "15", "90", "-", "50"]
    assert [t.get_text() for t in axes.get_yticklabels()] == ["layer 1", "layer 2"]


def test_a_transformer_s_ablations_name_the_heads_that_cost_nothing_significant() -> None:
    def score(bleu: float, p_all: float | None = None, p_long: float | None = None) -> dict[str, Any]:
        ps = {key: p for key, p in (("p_all", p_all), ("p_long", p_long)) if p is not None}
        return {"bleu": {"<10": bleu, "[10,20)": None, ">=20": bleu}, "all": bleu, "long": bleu - 1, **ps}

    ablations = {"none": score(20.0), "layer 1 head 1 silenced": score(19.5, 0.4, 0.01),
                 "layer 1 head 2 silenced": score(12.0, 0.002, 0.002), "layer 1 uniform": score(3.0, 0.002)}
    results = {**_results({"perturbation": ablations}), "significance": 0.05}
    markdown = format_checks_markdown(results)
    assert "| cross-attention | <10 (n=2) | >=20 (n=1) | all (n=3) | long | p (all) | p (long) |" in markdown
    assert "| none | 20.00 | 20.00 | 20.00 | 19.00 | - | - |" in markdown
    assert "| layer 1 uniform | 3.00 | 3.00 | 3.00 | 2.00 | 0.002 | - |" in markdown
    assert "on all sentences by no more than chance (p >= 0.05): layer 1 head 1 of 2." in markdown
    assert "on the long sentences by no more than chance (p >= 0.05): none of 2." in markdown
    # without eflomal's links, the figure plots the ablations, titled as what they are
    assert checks_figure(results).axes[0].get_title() == "search: greedy BLEU, cross-attention ablated"
    # too few long sentences in the sample: nothing was tested there, which is no "none of 2"
    without_long = {kind: {key: value for key, value in entry.items() if key != "p_long"} for kind, entry in ablations.items()}
    markdown = format_checks_markdown({**_results({"perturbation": without_long}), "significance": 0.05})
    assert ("Heads whose silencing changes BLEU on the long sentences: not tested (fewer than "
            "evaluation.min_bucket_sentences in the sample).") in markdown
    # the notes on an RNN's uniform / permute / argmax are not a Transformer's ablation's
    assert all(note in markdown for note in (*ABLATION_NOTES, *CAVEAT_NOTES))
    assert not any(note in markdown for note in PERTURBATION_NOTES)


def test_a_run_under_1_bleu_gets_evaluate_s_low_bleu_caution() -> None:
    def score(bleu: float, p_all: float | None = None) -> dict[str, Any]:
        p = {} if p_all is None else {"p_all": p_all}
        return {"bleu": {"<10": bleu, "[10,20)": None, ">=20": bleu}, "all": bleu, "long": None, **p}

    caution = ("search scores 0.17 BLEU on all sentences (under 1: too weak for its buckets to show anything): "
               "a BLEU this low chooses by noise")
    # a Transformer's ablation: 0.17 -> 0.15 with p = 0.002 is no evidence about its heads
    ablations = {"none": score(0.17), "layer 1 head 1 silenced": score(0.15, 0.002), "layer 1 uniform": score(0.1, 0.3)}
    assert caution in format_checks_markdown({**_results({"perturbation": ablations}), "significance": 0.05})
    # an RNN's perturbations
    low = {"none": score(0.17), "uniform": score(0.15)}
    assert caution in format_checks_markdown(_results({"perturbation": low}))
    assert "too weak" not in format_checks_markdown(_results({"perturbation": PERTURBATION}))  # none: 15.25
