"""The reports of the two attention analyses from their results: attention_checks.md and .png
(`nmt attention-checks`), attention_scaling.md and .png (`nmt attention-scaling`). nmt/compare/ measures
them with the runs; this renders them, with no model."""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.figure import Figure

from nmt.errors import counted
from nmt.evaluation.buckets import non_empty
from nmt.evaluation.low_bleu import CHOOSES_BY_NOISE, too_weak
from nmt.evaluation.tables import markdown_table, p_number
from nmt.figures import text_as_written

PERTURBATION_NOTES = (
    "- **uniform** spreads each step's weight evenly over the real source positions: the context no longer "
    "says where to look. A fall shows the decoder uses where the weights point; no fall would mean its "
    "state (or annotations that each summarise the whole sentence) carries what it needs.",
    "- **permute** keeps each step's weights (their peak and entropy) but moves them to random real "
    "positions (seeded, one permutation per sentence and step, drawn batch by batch: the same seed and batch size "
    "give the same permutations): it tests the places, not the shape.",
    "- **argmax** keeps only the most-weighted position, all mass on it: close to `none` means the weights "
    "act as a hard alignment and the rest of the distribution adds little.",
)
ABLATION_NOTES = (
    "- **head H silenced** zeroes that head's output before the layer's output projection (Michel et al. "
    "2019 mask heads so); **uniform** spreads every head's weight of the layer evenly over the real source "
    "positions; **only head H** silences all but the head that agrees best with the aligner.",
)
CAVEAT_NOTES = (
    "- What these cannot show (Jain & Wallace 2019, *Attention is not Explanation*; Wiegreffe & Pinter "
    "2019, *Attention is not not Explanation*): a perturbation that changes the output shows the weights "
    "are *used*, not that they *explain* the choice of a word; one that does not would not show they are "
    "unused, since the model may carry the information elsewhere. The replaced weights are never ones the "
    "model would produce: a counterfactual, not the model's own alternative (Wiegreffe & Pinter train "
    "adversarial models for that). In greedy decoding a changed word also changes every later step.",
)
ALIGNMENT_NOTES = (
    "- For each reference word, attention's argmax source word under teacher forcing (the model reads the "
    "reference, as Koehn & Knowles 2017 and Ghader & Monz 2017 measured), the weights summed over a source "
    "word's pieces and averaged over a target word's pieces (the attention plots' per-word maps). "
    "**agreement**: the share of reference words linked by the aligner at all whose argmax is a linked "
    "source word (precision of the argmax). **chance**: the same for a uniformly random choice among the "
    "source words and EOS; **diagonal**: for the source word at the same relative position. "
    "**on EOS**: argmaxes on the source end-of-sentence token (never linked, so counted as disagreeing).",
    "- The links are eflomal's (unsupervised, Bayesian IBM/HMM-style; both directions, symmetrised), trained "
    "on the run's prepared training pairs plus the test pairs, as is usual for unsupervised aligners: a "
    "strong statistical aligner, not gold links. Disagreement can be the aligner's error as well as "
    "attention's; attention may also look at a neighbouring or context word on purpose.",
)


def format_checks_markdown(results: dict[str, Any]) -> str:
    """attention_checks.md: the setting, then per run the perturbation table and the agreement table."""
    labels = non_empty(results["n"])
    head = [f"{label} (n={results['n'][label]})" for label in labels] + [f"all (n={results['sentences']})"]
    lines = [
        "# What attention weights do and do not tell",
        "",
        f"Test set: {results['test_set']}; {counted(results['sentences'], 'sentence')} ({results['selection']}), "
        f"bucketed by {results['by']} length in words. Decoding: {results['decoding']}. Permutation seed "
        f"{results['seed']}" + (f" at batch size {results['batch_size']}" if "batch_size" in results else "")
        + f"; links symmetrised by {results['symmetrisation']}.",
        # absent from the results of earlier versions
        *([f"BLEU: sacrebleu `{results['bleu_signature']}`; p: paired bootstrap, {results['bootstrap_samples']} "
           f"resamples, seed {results['bootstrap_seed']}."] if "bleu_signature" in results else []),
    ]
    for name, entry in results["runs"].items():
        lines += ["", f"## {name} (`{entry['run_dir']}`, {entry['checkpoint']})"]
        if _ablated(entry):
            lines += ["", *format_ablation(entry["perturbation"], labels, head, results["significance"])]
        elif "perturbation" in entry:
            lines += ["", "BLEU with the attention weights replaced at every decoder step:", ""]
            lines += markdown_table(["attention", *head], [
                [kind, *(_num(score["bleu"][label]) for label in labels), _num(score["all"])]
                for kind, score in entry["perturbation"].items()
            ])
        if "perturbation" in entry:
            lines += _low_bleu_caution(name, entry["perturbation"]["none"]["all"])
        if "alignment" in entry:
            lines += ["", "Argmax agreement with eflomal's links (teacher-forced, per reference word):", ""]
            rows = [[f"{point['checkpoint']} (step {point['step']})",
                     *(percent(point["buckets"][label]["agreement"]) for label in labels),
                     *(percent(point["all"][key]) for key in ("agreement", "chance", "diagonal", "argmax_on_eos")),
                     str(point["all"]["target_words"])] for point in entry["alignment"]]
            lines += markdown_table(["checkpoint", *head, "chance", "diagonal", "on EOS", "words"], rows)
            skipped = max(point["all"].get("skipped_sentences", 0) for point in entry["alignment"])
            if skipped:  # the n of the header is the test set's: say which of it the agreement leaves out
                lines += ["", f"{counted(skipped, 'sentence')} of {results['sentences']} left out: a side empty, or its "
                          "pieces do not make up its whitespace words (the words the aligner linked)."]
            for point in entry["alignment"]:
                if "heads" in point:
                    lines += ["", *format_heads(point, labels, head)]
    runs = results["runs"].values()
    notes = [*(PERTURBATION_NOTES if any("perturbation" in e and not _ablated(e) for e in runs) else ()),
             *(ABLATION_NOTES if any(_ablated(e) for e in runs) else ()),
             *(CAVEAT_NOTES if any("perturbation" in e for e in runs) else ()),
             *(ALIGNMENT_NOTES if any("alignment" in e for e in runs) else ())]
    lines += ["", "## What the numbers can and cannot show", "", *notes]
    return "\n".join(lines) + "\n"


def _low_bleu_caution(name: str, bleu: float) -> list[str]:
    """Markdown lines under a run's perturbation table: none, or, if the run's own greedy BLEU (`none`) is too
    low to tell anything, `nmt evaluate`'s caution, since its rows then differ by noise whatever their p."""
    weak = too_weak({name: bleu})
    if not weak:
        return []
    return ["", f"**Caution:** {weak}: {CHOOSES_BY_NOISE}, and a difference between these rows, whatever its p, "
            "says nothing about attention."]


def _ablated(entry: dict[str, Any]) -> bool:
    """Whether a run's perturbation is a Transformer's head ablation (format_ablation), not an RNN's."""
    return "layer 1 uniform" in entry.get("perturbation", {})


def format_ablation(scores: dict[str, Any], labels: list[str], head: list[str], significance: float) -> list[str]:
    """Markdown lines: a Transformer's BLEU with its cross-attention ablated (`head_ablation_bleu`), each
    row's paired-bootstrap p against `none`, and the ablations that cost no significant BLEU."""
    lines = ["Greedy BLEU with the cross-attention of one decoder layer ablated (p: paired bootstrap against "
             "`none`; long: the sentences of evaluation.long_words words or more):", ""]
    lines += markdown_table(["cross-attention", *head, "long", "p (all)", "p (long)"], [
        [kind, *(_num(score["bleu"][label]) for label in labels), _num(score["all"]), _num(score["long"]),
         *(p_number(score[key], significance) if key in score else "-" for key in ("p_all", "p_long"))]
        for kind, score in scores.items()
    ])
    silenced = [kind for kind in scores if kind.endswith("silenced")]
    for part, what in (("p_all", "all sentences"), ("p_long", "the long sentences")):
        tested = [kind for kind in silenced if part in scores[kind]]
        if not tested:  # too few such sentences in the sample: nothing was tested there
            lines += ["", f"Heads whose silencing changes BLEU on {what}: not tested (fewer than "
                      "evaluation.min_bucket_sentences in the sample)."]
            continue
        free = [kind.removesuffix(" silenced") for kind in tested if scores[kind][part] >= significance]
        lines += ["", f"Heads whose silencing changes BLEU on {what} by no more than chance (p >= {significance:g}): "
                  f"{', '.join(free) or 'none'} of {len(tested)}."]
    return lines


def head_grid(heads: dict[str, Any]) -> tuple[list[str], list[str], list[list[float | None]]]:
    """(layer names, column names: "head 1".. and "mean", agreement over all sentences) of a checkpoint's
    per-head results, whose keys are "layer L head H" and "layer L mean"."""
    layers = list(dict.fromkeys(" ".join(view.split()[:2]) for view in heads))  # "layer L"
    columns = list(dict.fromkeys(view.split(" ", 2)[2] for view in heads))
    grid = [[heads[f"{layer} {column}"]["all"]["agreement"] for column in columns] for layer in layers]
    return layers, columns, grid


def format_heads(point: dict[str, Any], labels: list[str], head: list[str]) -> list[str]:
    """Markdown lines: a checkpoint's agreement per decoder layer (rows) and cross-attention head (columns,
    and their mean), then every head's agreement by bucket."""
    layers, columns, grid = head_grid(point["heads"])
    lines = [f"Per decoder layer and head of the cross-attention, {point['checkpoint']} (step {point['step']}), "
             "all sentences:", ""]
    lines += markdown_table(["layer", *columns], [[layer, *map(percent, row)] for layer, row in zip(layers, grid, strict=True)])
    lines += ["", "By bucket:", ""]
    return lines + markdown_table(["layer and head", *head], [
        [view, *(percent(scores["buckets"][label]["agreement"]) for label in labels), percent(scores["all"]["agreement"])]
        for view, scores in point["heads"].items()
    ])


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


@text_as_written()
def checks_figure(results: dict[str, Any]) -> Figure:
    """One row per run: BLEU by bucket for each perturbation (left; for a Transformer, the evaluated
    checkpoint's agreement per layer and head), agreement by bucket per checkpoint with the chance level
    dashed (right)."""
    labels = non_empty(results["n"])
    runs = results["runs"]
    figure = Figure(figsize=(12, 4 * len(runs)))
    panels = figure.subplots(len(runs), 2, squeeze=False)
    for (left, right), (name, entry) in zip(panels, runs.items(), strict=True):
        final = (entry.get("alignment") or [{}])[-1]
        if "heads" in final:  # a Transformer aligned with eflomal: its heatmap of layers x heads
            _heads_heatmap(left, final, name)
        else:
            for kind, score in entry.get("perturbation", {}).items():
                left.plot(labels, [score["bleu"][label] for label in labels], marker="o", label=kind)
            # a Transformer whose heads were not aligned (no eflomal) shows its ablations here
            left.set_title(f"{name}: greedy BLEU, {'cross-attention ablated' if _ablated(entry) else 'attention weights replaced'}")
            left.set(ylabel="BLEU", xlabel=f"{results['by']} length (words)")
            left.grid(alpha=0.3)
        for point in entry.get("alignment", []):
            # in %; a bucket without a linked word (None) is no point (NaN), not 0%
            right.plot(labels, 100 * np.array([point["buckets"][label]["agreement"] for label in labels], dtype=float),
                       marker="o", label=f"{point['checkpoint'].removesuffix('.pt')} (step {point['step']})")
        if final:
            for key, style in (("diagonal", "k:"), ("chance", "k--")):
                shares = np.array([final["buckets"][label][key] for label in labels], dtype=float)
                right.plot(labels, 100 * shares, style, label=key)
        right.set_title(f"{name}: argmax agrees with eflomal (%)")
        right.set(ylim=(0, 100), xlabel=f"{results['by']} length (words)")
        right.grid(alpha=0.3)
        for axes in (left, right):
            if axes.get_legend_handles_labels()[0]:
                axes.legend(fontsize=8)
    figure.tight_layout()
    return figure


def _heads_heatmap(axes: Any, point: dict[str, Any], name: str) -> None:
    """Agreement (%) per decoder layer (rows) and head (columns, then their mean), numbers in the cells."""
    layers, columns, grid = head_grid(point["heads"])
    values = 100 * np.array(grid, dtype=float)  # None: NaN
    image = axes.imshow(values, cmap="viridis", vmin=0, vmax=100, aspect="auto")
    axes.figure.colorbar(image, ax=axes, label="agreement (%)")
    axes.set_xticks(range(len(columns)), columns)
    axes.set_yticks(range(len(layers)), layers)
    for (row, column), value in np.ndenumerate(values):
        axes.text(column, row, "-" if np.isnan(value) else f"{value:.0f}", ha="center", va="center", color="w")
    axes.set_title(f"{name}: argmax agrees with eflomal, per head ({point['checkpoint']})")


SCALING_COLUMNS = (  # results key, title ({saturated_above}: the threshold the run used), format
    ("score_variance", "score variance", "{:.3g}"),
    ("max_weight", "mean largest weight", "{:.3f}"),
    ("saturated_share", "steps with largest weight > {saturated_above}", "{:.1%}"),
    ("entropy_ratio", "entropy / uniform", "{:.3f}"),
    ("score_grad_norm", "gradient norm at the softmax's input", "{:.3g}"),
    ("loss_per_token", "cross-entropy (nats/token)", "{:.3f}"),
)


def format_scaling_markdown(results: dict[str, Any]) -> str:
    """attention_scaling.md: a row per run and moment (initialisation, trained), a column per statistic."""
    titles = [title.format(saturated_above=results["saturated_above"]) for _, title, _ in SCALING_COLUMNS]
    header = ["run", "attention", "d", "when", *titles]
    rows = [
        [name, run["attention"], str(run["attention_size"]), label,
         *(fmt.format(run[when][key]) for key, _, fmt in SCALING_COLUMNS)]
        for name, run in results["runs"].items()
        for when, label in (("initialisation", "init"), ("trained", f"step {run['step']}"))
    ]
    lines = [
        "# Attention scores, weights and gradients: why divide by sqrt(d)",
        "",
        # always the curve's sample (nmt/compare/attention_scaling.py), described as "sample of the test split of ..."
        f"Teacher-forced on a {results['sentences']}; means over decoder steps, each over the real source "
        "positions. 'initialisation': the run's config and seed before any step; 'trained': its checkpoint.",
        "",
        *markdown_table(header, rows, left=4),
    ]
    for name, run in results["runs"].items():
        if "parts" in run:  # a Transformer: its cross-attention per decoder layer (heads together) and head
            lines += ["", f"{name}, per decoder layer and cross-attention head:", "", *markdown_table(
                ["part", "when", *titles],
                [[part, label, *(fmt.format(moments[when][key]) for key, _, fmt in SCALING_COLUMNS)]
                 for part, moments in run["parts"].items()
                 for when, label in (("initialisation", "init"), ("trained", f"step {run['step']}"))],
                left=2,
            )]
    return "\n".join(lines) + "\n"


SCALING_COLOURS = ("tab:red", "tab:blue", "tab:green", "tab:orange", "tab:purple", "tab:brown", "tab:pink", "tab:gray")


@text_as_written()
def scaling_figure(results: dict[str, Any]) -> Figure:
    """One panel per statistic against d (log scale): a line per attention type, hollow markers at
    initialisation, filled once trained."""
    figure = Figure(figsize=(15, 4))
    panels = figure.subplots(1, 4)
    keys = ("score_variance", "max_weight", "entropy_ratio", "score_grad_norm")
    kinds = sorted({run["attention"] for run in results["runs"].values()})
    for axes, key in zip(panels, keys, strict=True):
        title = next(title for k, title, _ in SCALING_COLUMNS if k == key)
        for index, kind in enumerate(kinds):  # six kinds at most: additive, dot, general, scaled_dot, two Transformers
            colour = SCALING_COLOURS[index % len(SCALING_COLOURS)]
            runs = sorted((r for r in results["runs"].values() if r["attention"] == kind), key=lambda r: r["attention_size"])
            sizes = [r["attention_size"] for r in runs]
            axes.plot(sizes, [r["trained"][key] for r in runs], "o-", color=colour, label=f"{kind}, trained")
            axes.plot(sizes, [r["initialisation"][key] for r in runs], "o--", color=colour, mfc="none",
                      label=f"{kind}, initialisation")
        axes.set_xscale("log", base=2)
        if key in ("score_variance", "score_grad_norm"):
            axes.set_yscale("log")
        axes.set_title(title)
        axes.set_xlabel("d (attention_size; general: hidden_size; a Transformer's d_k per head)")
        axes.grid(alpha=0.3)
    # below the panels, not inside one: inside, it covered points of the gradient panel
    figure.legend(*panels[0].get_legend_handles_labels(), loc="lower center", ncol=4, fontsize=8)
    figure.tight_layout(rect=(0, 0.1, 1, 1))
    return figure
