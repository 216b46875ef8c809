"""`nmt curve`: the fixed sample, BLEU per bucket of every kept checkpoint, the cache, the files."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from nmt.cli import main
from nmt.compare import curve
from nmt.compare.curve import learning_curves
from nmt.errors import NMTError
from nmt.evaluation import testset
from nmt.evaluation.buckets import sentence_lengths
from nmt.evaluation.curves import bucket_counts, curve_sample, learning_curve_figure
from nmt.lengths import assign_buckets, make_buckets
from nmt.rundir.checkpoints import checkpoint_step, step_checkpoints
from tests.helpers import reverse_task_config

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
CUTOFFS = [7, 10]  # the reverse task's 5-12 digit sentences: <7, [7,10), >=10
PER_BUCKET = 8


@pytest.fixture(scope="module")
def curve_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny RNNsearch trained 100 steps on reversing 5-12 digits, with all four checkpoints kept (25..100)."""
    from nmt.training.trainer import train

    root = tmp_path_factory.mktemp("curve_run")
    config = reverse_task_config(
        root / "data",
        training={"max_steps": 100, "checkpoint_every": 25, "keep_last": 0, "validate_every": 100, "batch_tokens": 1000},
    )
    config.evaluation.buckets = CUTOFFS
    config.evaluation.curve_sentences_per_bucket = PER_BUCKET
    train(config, root / "run", resume=False)
    return root / "run"


def test_sample_is_fixed_stratified_and_order_free() -> None:
    sources = [" ".join("1" * n) + f" {i}" for i, n in enumerate([3] * 5 + [12] * 30 + [25] * 2)]
    references = [f"ref {i}" for i in range(len(sources))]
    rows = curve_sample(sources, references, [10, 20], "source", per_bucket=10)
    assert rows == curve_sample(sources, references, [10, 20], "source", per_bucket=10)
    assert rows == sorted(rows)
    members = assign_buckets(sentence_lengths(sources, references, "source"), make_buckets([10, 20]))
    assert [sum(members[i] == b for i in rows) for b in range(3)] == [5, 10, 2]  # small buckets kept whole
    # of the 30 in [10,20), the 10 whose sha256 of "source TAB reference" is smallest, computed here
    digest = {i: hashlib.sha256(f"{sources[i]}\t{references[i]}".encode()).digest() for i in range(5, 35)}
    assert [i for i in rows if members[i] == 1] == sorted(sorted(digest, key=digest.__getitem__)[:10])
    # the same sentences are chosen whatever the order of the file
    order = list(reversed(range(len(sources))))
    again = curve_sample([sources[i] for i in order], [references[i] for i in order], [10, 20], "source", 10)
    assert sorted(sources[order[i]] for i in again) == sorted(sources[i] for i in rows)
    assert curve_sample(sources, references, [10, 20], "source", per_bucket=0) == list(range(len(sources)))


def test_bucket_counts_go_by_the_length_asked_for_and_need_sources() -> None:
    sample = testset.TestSet(["a b c", "a"], ["x", "x y z w"], "two pairs")
    assert bucket_counts(sample, [2], "source") == {"<2": 1, ">=2": 1}
    assert bucket_counts(sample, [4], "reference") == {"<4": 1, ">=4": 1}
    with pytest.raises(AssertionError):  # references alone would be bucketed by reference under by=source
        bucket_counts(testset.TestSet(None, ["x", "x y z w"], "--ref r"), [2], "source")


def test_curve_scores_every_kept_checkpoint_and_caches(
    curve_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    results = learning_curves([curve_run], out_dir=tmp_path / "out", device="cpu")
    curve = results["runs"]["run"]
    saved_steps = [checkpoint_step(path) for path in step_checkpoints(curve_run)]
    assert saved_steps == [25, 50, 75, 100]
    assert [point["step"] for point in curve["checkpoints"]] == saved_steps
    # every bucket is in the sample, each capped at PER_BUCKET (the 40 test sentences hold more of each)
    assert list(curve["n"]) == ["<7", "[7,10)", ">=10"]
    assert list(curve["n"].values()) == [PER_BUCKET] * 3 and curve["n_sample"] == 3 * PER_BUCKET
    first, last = curve["checkpoints"][0], curve["checkpoints"][-1]
    assert not first["cached"]
    assert last["sample_bleu"] > first["sample_bleu"] + 30
    for label in curve["n"]:
        assert last["bleu"][label] > first["bleu"][label] + 20
    assert last["sample_bleu"] > 50

    saved = json.loads((tmp_path / "out" / "learning_curve.json").read_text(encoding="utf-8"))
    assert saved == results
    # how BLEU was scored, as beside every score: sacrebleu's signature, in the JSON and the Markdown
    assert results["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")
    assert f"BLEU: sacrebleu `{results['bleu_signature']}`." in (tmp_path / "out" / "learning_curve.md").read_text()
    # no folder of the machine: the sample by what it is, files by name (outside here and --out)
    assert re.fullmatch(r"sample of the test split of prepared \(files, src -> tgt\), 24 sentences, sha256 \w{12}",
                        curve["sentences"])
    assert (curve["run_dir"], last["checkpoint"]) == ("run", "step_00000100.pt")
    assert str(curve_run.parent) not in json.dumps(saved)
    table = (tmp_path / "out" / "learning_curve.md").read_text(encoding="utf-8")
    assert "| step | <7 (n=8) | [7,10) (n=8) | >=10 (n=8) | sample (n=24) |" in table
    assert f"| 100 | {last['bleu']['<7']:.2f} |" in table
    assert (tmp_path / "out" / "learning_curve.png").read_bytes()[:8] == PNG_MAGIC

    # a second call translates nothing: every checkpoint's greedy output comes from RUN_DIR/hyps/
    from nmt.decoding.translator import Translator

    def no_decoding(*args: object, **kwargs: object) -> None:
        raise AssertionError("a cached checkpoint was translated again")

    monkeypatch.setattr(Translator, "from_run", no_decoding)
    again = learning_curves([curve_run], out_dir=tmp_path / "again", device="cpu")
    assert all(point["cached"] for point in again["runs"]["run"]["checkpoints"])
    assert [p["bleu"] for p in again["runs"]["run"]["checkpoints"]] == [p["bleu"] for p in curve["checkpoints"]]


WORDS = ["the cat sat on the mat", "a dog barked at night",
         "birds sing in the morning", "rain fell on the roof"]


def test_curve_bleu_follows_the_runs_lowercase_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # as `nmt evaluate`, the curve scores with the run's evaluation.lowercase (and tokenize): an all-uppercase
    # copy of the references is a perfect translation once case is folded
    from nmt.config import Config, save_config

    config = Config()
    config.evaluation.lowercase, config.evaluation.buckets = True, [6]
    save_config(config, tmp_path / "run" / "config.yaml")
    (tmp_path / "run" / "checkpoints").mkdir()
    (tmp_path / "run" / "checkpoints" / "step_00000010.pt").write_bytes(b"weights")
    test_set = testset.TestSet(WORDS, WORDS, "four sentences")
    monkeypatch.setattr(curve, "split_test_set", lambda config, split: test_set)
    monkeypatch.setattr(curve, "translate_cached", lambda run, sample, device: (
        [line.upper() for line in sample.references], tmp_path / "hyps.txt", False))
    results = learning_curves([tmp_path / "run"], out_dir=tmp_path / "out", per_bucket=0)
    (point,) = results["runs"]["run"]["checkpoints"]
    assert point["sample_bleu"] == pytest.approx(100.0)
    assert point["bleu"] == pytest.approx({"<6": 100.0, ">=6": 100.0})


def test_cli_curve_and_its_errors(
    curve_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "cli"
    assert main(["curve", str(curve_run), "--out", str(out), "--sentences-per-bucket", "0", "--device", "cpu"]) == 0
    saved = json.loads((out / "learning_curve.json").read_text(encoding="utf-8"))
    assert saved["sentences_per_bucket"] == 0 and saved["runs"]["run"]["n_sample"] == 40  # the whole split
    assert main(["curve", str(curve_run), "--out", str(out), "--sentences-per-bucket", "-1"]) == 2
    assert "it must be >= 0" in capsys.readouterr().err
    bare = tmp_path / "bare"
    (bare / "checkpoints").mkdir(parents=True)
    (bare / "config.yaml").write_text((curve_run / "config.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    (bare / "checkpoints" / "best.pt").write_bytes((curve_run / "checkpoints" / "best.pt").read_bytes())
    with pytest.raises(NMTError, match="no periodic checkpoints"):
        learning_curves([bare], out_dir=tmp_path / "none")
    assert not (tmp_path / "none").exists()
    with monkeypatch.context() as patched:  # given after a run that has some: refused before any translating
        patched.setattr(curve, "translate_cached", lambda *args: pytest.fail("a checkpoint was translated"))
        with pytest.raises(NMTError, match=f"{bare} has no periodic checkpoints"):
            learning_curves([curve_run, bare], out_dir=tmp_path / "none")
    assert not (tmp_path / "none").exists()
    # interrupted before its first periodic checkpoint: the message says so and how to continue the run
    (bare / "checkpoints" / "interrupted_00000010.pt").write_bytes((curve_run / "checkpoints" / "best.pt").read_bytes())
    assert main(["curve", str(bare), "--out", str(tmp_path / "none"), "--device", "cpu"]) == 2
    assert capsys.readouterr().err == (
        f"nmt curve: error: {bare} has no periodic checkpoint (checkpoints/step_*.pt) to draw a curve from: its "
        "training stopped (or validated best) at step 10, before its first one, and left "
        "checkpoints/interrupted_00000010.pt, which is for --resume only.\nContinue the run with `nmt train CONFIG "
        f"--run-dir {bare} --resume` (CONFIG: the one it was trained with; for a run of `nmt experiment`, run the "
        "same experiment again): it saves a step_*.pt every training.checkpoint_every steps.\n"
    )
    assert not (tmp_path / "none").exists()
    # a checkpoint given as RUN_DIR: its run is named, and no --checkpoint, which nmt curve does not take
    step = curve_run / "checkpoints" / "step_00000025.pt"
    assert main(["curve", str(step), "--out", str(tmp_path / "none")]) == 2
    assert capsys.readouterr().err == (f"nmt curve: error: {step} is a file, not a run directory.\n"
                                       f"Give its run folder, {curve_run}.\n")
    assert not (tmp_path / "none").exists()


def test_sample_size_key_is_validated_and_free_to_change_on_resume(tmp_path: Path) -> None:
    from nmt.config import load_config
    from nmt.rundir.checks import learning_differences

    quick = Path(__file__).resolve().parent.parent / "configs" / "quick.yaml"
    with pytest.raises(NMTError, match="evaluation.curve_sentences_per_bucket"):
        load_config(quick, ["evaluation.curve_sentences_per_bucket=-1"])
    changed = load_config(quick, ["evaluation.curve_sentences_per_bucket=0"])
    assert learning_differences(load_config(quick), changed) == []


def test_panels_share_the_step_axis_from_zero() -> None:
    """A run trained twice as long as another: every panel spans the same steps, so the same step is at
    the same place in each (as the paper's -30 / -50 runs, and quick.yaml's RNNencdec-50, differ)."""

    def curve(steps: list[int], attention: str) -> dict:
        points = [{"step": step, "bleu": {"<7": step / 10, ">=7": step / 20}} for step in steps]
        return {"attention": attention, "n": {"<7": 8, ">=7": 8}, "n_sample": 16, "checkpoints": points}

    results = {"by": "source", "runs": {"short": curve([300, 600, 900], "additive"),
                                        "long": curve([300, 600, 900, 1200, 1500, 1800], "none")}}
    short, long = learning_curve_figure(results).axes
    assert short.get_xlim() == long.get_xlim()
    left, right = short.get_xlim()
    assert left == 0 and 1800 <= right < 1900
    assert short.get_ylim() == long.get_ylim() and short.get_ylim()[0] == 0
    assert list(short.lines[0].get_xdata()) == [300, 600, 900] and list(long.lines[1].get_ydata()) == [
        15, 30, 45, 60, 75, 90
    ]


def test_a_bucket_has_one_colour_in_every_panel() -> None:
    """A run whose sample has no sentence in the longest bucket (other data): its middle bucket is drawn in
    the middle bucket's colour, as in the panel that has all three, not in the longest's."""

    def curve(n: dict[str, int]) -> dict:
        points = [{"step": 100, "bleu": {label: (5.0 if count else None) for label, count in n.items()}}]
        return {"attention": "additive", "n": n, "n_sample": sum(n.values()), "checkpoints": points}

    results = {"by": "source", "runs": {"all": curve({"<7": 8, "[7,10)": 8, ">=10": 8}),
                                        "short": curve({"<7": 8, "[7,10)": 8, ">=10": 0})}}
    full, short = learning_curve_figure(results).axes
    assert [line.get_label() for line in short.lines] == ["<7 (n=8)", "[7,10) (n=8)"]
    assert short.lines[0].get_color() == full.lines[0].get_color()
    assert short.lines[1].get_color() == full.lines[1].get_color() != full.lines[2].get_color()
    # the legend, beside the last panel, names the bucket only the first panel draws
    results["runs"] = dict(reversed(results["runs"].items()))
    legend = learning_curve_figure(results).axes[-1].get_legend()
    assert [text.get_text() for text in legend.get_texts()] == ["<7 (n=8)", "[7,10) (n=8)", ">=10 (n=8)"]


def test_runs_on_different_data_name_their_samples() -> None:
    """Runs on different data are scored on different samples: each table names its own; on one sample,
    no table repeats it."""
    from nmt.evaluation.curves import format_curve_markdown

    def curve(sentences: str) -> dict:
        points = [{"step": 100, "bleu": {"<7": 5.0}, "sample_bleu": 5.0}]
        return {"attention": "additive", "sentences": sentences, "n": {"<7": 8}, "n_sample": 8, "checkpoints": points}

    results = {"split": "test", "by": "source", "sentences_per_bucket": 8, "selection": "smallest sha256",
               "runs": {"a": curve("sample of split test, 8 sentences, sha256 aaa"),
                        "b": curve("sample of split test, 8 sentences, sha256 bbb")}}
    text = format_curve_markdown(results)
    assert text.index("## a") < text.index("Sample: sample of split test, 8 sentences, sha256 aaa.") < text.index("## b")
    assert text.index("## b") < text.index("Sample: sample of split test, 8 sentences, sha256 bbb.")
    results["runs"]["b"] = curve("sample of split test, 8 sentences, sha256 aaa")
    assert "Sample:" not in format_curve_markdown(results)


def test_the_panels_titles_do_not_overlap() -> None:
    """A Transformer's kind names its positions: on one line, its panel's title ran into the next one's."""
    def curve(attention: str) -> dict:
        return {"attention": attention, "n": {"<7": 8}, "n_sample": 8, "checkpoints": [{"step": 100, "bleu": {"<7": 5.0}}]}

    kind = "multi-head (Transformer, sinusoidal positions)"
    results = {"by": "source", "runs": {"transformer-30": curve(kind), "transformer-30-relative": curve(kind)}}
    figure = learning_curve_figure(results)
    renderer = FigureCanvasAgg(figure).get_renderer()  # as the PNG is drawn
    left, right = (axes.title.get_window_extent(renderer) for axes in figure.axes)
    assert left.x1 < right.x0 and left.x0 >= 0
    assert figure.axes[0].get_title() == f"transformer-30\nattention: {kind}"
