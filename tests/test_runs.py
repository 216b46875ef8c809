"""nmt.compare.runs (the runs as evaluate sees them), with the test-set files (nmt.evaluation.testset) and the
key of the translation cache (nmt.rundir.translations)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from nmt.cli import main
from nmt.compare.runs import (
    check_sentences_per_bucket,
    decoding_settings,
    default_out_dir,
    describe_runs,
    refuse_foreign_outputs,
    write_outputs,
)
from nmt.config import Config, save_config
from nmt.errors import NMTError
from nmt.evaluation.testset import file_test_set, shown_path
from nmt.rundir.translations import cache_key, cache_path, read_cached, write_cached
from tests.helpers import fake_run


def test_file_test_set_reads_parallel_files(tmp_path: Path) -> None:
    (tmp_path / "s.txt").write_text("a b\nc d e\n", encoding="utf-8")
    (tmp_path / "r.txt").write_text("x y\r\nz\n", encoding="utf-8")
    test_set = file_test_set(tmp_path / "s.txt", tmp_path / "r.txt")
    assert (test_set.sources, test_set.references) == (["a b", "c d e"], ["x y", "z"])


def test_file_test_set_user_errors(tmp_path: Path) -> None:
    (tmp_path / "s.txt").write_text("a\nb\nc\n", encoding="utf-8")
    (tmp_path / "r.txt").write_text("a\nb\n", encoding="utf-8")
    (tmp_path / "bad.txt").write_bytes(b"ok\nfine\ncaf\xe9\n")
    with pytest.raises(NMTError, match=r"s.txt has 3 lines but --ref .*r.txt has 2"):
        file_test_set(tmp_path / "s.txt", tmp_path / "r.txt")
    with pytest.raises(NMTError, match=r"--ref .*bad.txt, line 3: not valid UTF-8"):
        file_test_set(tmp_path / "s.txt", tmp_path / "bad.txt")
    with pytest.raises(NMTError, match=r"--src not found: .*missing.txt") as error:
        file_test_set(tmp_path / "missing.txt", tmp_path / "r.txt")
    assert error.value.hint == "Give an existing text file to --src."
    (tmp_path / "empty.txt").write_text("", encoding="utf-8")  # nothing to do, said with the command's verb
    with pytest.raises(NMTError) as error:
        file_test_set(tmp_path / "s.txt", tmp_path / "empty.txt")
    assert error.value.message == f"--ref {tmp_path / 'empty.txt'} is empty: nothing to evaluate."


def test_an_out_folder_in_or_of_prepared_data_is_refused(tmp_path: Path) -> None:
    """`nmt prepare` replaces a prepared data folder whole: a report there, in the folder itself as in one below it,
    would be lost with the next preparation."""
    prepared = tmp_path / "prepared"
    prepared.mkdir()
    (prepared / "prepared.json").write_text("{}", encoding="utf-8")
    for out, where in ((prepared, "is"), (prepared / "sub", "is inside")):
        with pytest.raises(NMTError) as error:
            default_out_dir([tmp_path / "run"], out)
        assert error.value.message == (f"--out {out} {where} the prepared data folder {prepared}, which `nmt prepare` "
                                       "replaces whole.")
    assert default_out_dir([tmp_path / "run"], tmp_path / "beside") == tmp_path / "beside"


def test_the_out_folder_given_wins_over_the_default(tmp_path: Path) -> None:
    runs = [tmp_path / "a", tmp_path / "b"]
    assert default_out_dir(runs, tmp_path / "mine") == tmp_path / "mine"
    assert default_out_dir(runs) == tmp_path.resolve() / "evaluation"
    assert default_out_dir(runs[:1], None) == tmp_path / "a" / "evaluation"


def test_a_negative_sample_size_is_one_message_for_every_command() -> None:
    check_sentences_per_bucket(None)  # the config's value, checked when it was loaded
    check_sentences_per_bucket(0)
    with pytest.raises(NMTError, match=r"--sentences-per-bucket -2: it must be >= 0\.") as error:
        check_sentences_per_bucket(-2)
    assert error.value.hint == "Give a count, or 0 for every sentence."


def test_decode_time_overrides_change_the_cache_key_and_refuse_learning_keys(tmp_path: Path) -> None:
    run_dir = fake_run(tmp_path / "run")
    (run,) = describe_runs([run_dir], ["decoding.beam_size=2", "decoding.alpha=1.0", "evaluation.by=reference"])
    assert (run.config.decoding.beam_size, run.config.decoding.alpha, run.config.evaluation.by) == (2, 1.0, "reference")
    plain = describe_runs([run_dir])[0]
    assert cache_key(run.checkpoint, ["a"], decoding_settings(run.config), "cpu") != cache_key(
        plain.checkpoint, ["a"], decoding_settings(plain.config), "cpu"
    )
    with pytest.raises(NMTError, match=r"nmt evaluate takes only decoding.\* or evaluation.\* keys") as error:
        describe_runs([run_dir], ["training.max_steps=5"])
    assert "fixed when a run is trained" in error.value.message
    with pytest.raises(NMTError, match=r"has no .*averaged.pt"):
        describe_runs([run_dir], checkpoint="averaged.pt")
    (run_dir / "checkpoints" / "averaged.pt").write_bytes(b"w")
    assert describe_runs([run_dir], checkpoint="averaged.pt")[0].checkpoint == run_dir / "checkpoints" / "averaged.pt"


def test_a_bad_set_of_a_run_is_fixed_on_the_command_line_not_in_a_config(tmp_path: Path) -> None:
    """evaluate and translate read the run's config.yaml, the record of its training, and no config of the
    user's: a refused --set value is to be fixed on the command line, and a config's runs.NAME.decoding.KEY
    is pointed to the decoding.KEY that overrides the run's own setting."""
    run_dir = fake_run(tmp_path / "run", beam_size=4)
    with pytest.raises(NMTError, match=r"invalid value for 'decoding.max_length_ratio': must be > 0") as error:
        describe_runs([run_dir], ["decoding.max_length_ratio=-1"])
    assert error.value.hint == "Fix the value of --set decoding.max_length_ratio on the command line."
    with pytest.raises(NMTError, match=r"--set runs.search.decoding.beam_size=3: .*RUN_DIR's own settings") as error:
        describe_runs([run_dir], ["runs.search.decoding.beam_size=3"])
    assert error.value.hint == "Use --set decoding.beam_size=3."
    assert "fixed when a run is trained" not in error.value.message
    # a value refused beside another key's new one: the key to give is named, though no --set gave it
    config = Config()
    config.decoding.beam_size, config.decoding.nbest = 4, 3
    save_config(config, run_dir / "config.yaml")
    with pytest.raises(NMTError, match=r"'decoding.nbest': 3 is above decoding.beam_size 2") as error:
        describe_runs([run_dir], ["decoding.beam_size=2"])
    assert error.value.hint == "Give it a value that fits on the command line: --set decoding.nbest=..."


def test_cache_key_follows_checkpoint_source_and_decoding(tmp_path: Path) -> None:
    run = describe_runs([fake_run(tmp_path / "run")])[0]
    decoding = decoding_settings(run.config)
    assert decoding["beam_size"] == 5 and "batch_size" not in decoding
    key = cache_key(run.checkpoint, ["a b"], decoding, "cpu")
    assert cache_key(run.checkpoint, ["a b"], decoding, "cpu") == key
    assert cache_key(run.checkpoint, ["a c"], decoding, "cpu") != key
    (beam_2,) = describe_runs([run.run_dir], ["decoding.beam_size=2"])
    assert cache_key(run.checkpoint, ["a b"], decoding_settings(beam_2.config), "cpu") != key
    # decoding.min_length at 0 searches as before the key existed: out of the key, so earlier caches are found
    assert "min_length" not in decoding
    (at_least_2,) = describe_runs([run.run_dir], ["decoding.min_length=2"])
    assert decoding_settings(at_least_2.config) == {**decoding, "min_length": 2}
    assert cache_key(run.checkpoint, ["a b"], decoding, "cuda") != key  # a GPU's floats: other translations
    run.checkpoint.write_bytes(b"retrained weights")
    assert cache_key(run.checkpoint, ["a b"], decoding, "cpu") != key


def test_a_test_set_is_described_by_what_it_is_not_by_the_machine_s_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import nmt.compare.runs
    from nmt.compare.runs import split_test_set
    from nmt.config import config_from_dict

    pairs = [("a b", "x"), ("c", "y z")]
    monkeypatch.setattr(nmt.compare.runs, "load_prepared", lambda data: type("P", (), {"pairs": lambda self, s: pairs})())
    config = config_from_dict({"data": {"dir": str(tmp_path / "prepared" / "bible-k-l")}})
    described = split_test_set(config, "test").describe()
    assert re.fullmatch(r"test split of bible-k-l \(bible, k -> l\), 2 sentences, sha256 [0-9a-f]{12}", described)
    pairs[1] = ("c", "y")  # the hash follows the content, the references'
    assert split_test_set(config, "test").describe()[-12:] != described[-12:]
    pairs[1] = ("d", "y z")  # and the sources'
    assert split_test_set(config, "test").describe()[-12:] != described[-12:]
    monkeypatch.chdir(tmp_path)  # under the working directory: the path relative to it
    assert split_test_set(config, "test").describe().startswith("test split of prepared/bible-k-l (bible, k -> l)")
    assert file_test_set(*[_lines(tmp_path / "t" / name) for name in ("s.txt", "r.txt")]).origin == "--src t/s.txt"


def _lines(path: Path) -> Path:
    path.parent.mkdir(exist_ok=True)
    path.write_text("a\n", encoding="utf-8")
    return path


def test_a_shown_path_is_relative_to_the_working_directory_or_the_report_else_a_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert shown_path(tmp_path / "exp" / "runs" / "a") == "exp/runs/a"
    elsewhere = tmp_path.parent / "elsewhere"
    assert shown_path(elsewhere / "runs" / "a", elsewhere) == "runs/a"
    assert shown_path(elsewhere / "runs" / "a", tmp_path / "out") == "a"


def test_a_missing_folder_does_not_exist_and_an_experiment_s_points_to_its_runs(tmp_path: Path) -> None:
    """An experiment's --out given as a run is named as such, with its runs, whether or not it holds the
    config.yaml that `nmt experiment` writes there: with one, it is not taken for a run without checkpoints; and
    its runs/ folder is named as a folder of runs."""
    with pytest.raises(NMTError, match=r"nothing does not exist\."):
        describe_runs([tmp_path / "nothing"])
    experiment = tmp_path / "exp"
    fake_run(experiment / "runs" / "rnnsearch")
    fake_run(experiment / "runs" / "rnnencdec")
    for written in (False, True):
        if written:
            save_config(Config(), experiment / "config.yaml")
        with pytest.raises(NMTError) as error:
            describe_runs([experiment])
        assert error.value.message == f"{experiment} is an experiment's folder, not a training run."
        assert error.value.hint == f"Pass its runs, {experiment}/runs/NAME (rnnencdec, rnnsearch)."
    with pytest.raises(NMTError, match=r"runs is not a training run \(no config.yaml\)") as error:
        describe_runs([experiment / "runs"])
    assert error.value.hint == f"It holds runs: pass them, {experiment}/runs/NAME (rnnencdec, rnnsearch)."


def test_a_runs_checkpoints_folder_given_as_a_run_names_the_run(tmp_path: Path) -> None:
    """RUN_DIR/checkpoints (or tokenizer/) given for RUN_DIR is refused naming the run folder to give instead."""
    run = fake_run(tmp_path / "run")
    (run / "tokenizer").mkdir()
    for name in ("checkpoints", "tokenizer"):
        with pytest.raises(NMTError, match=rf"{name} is not a training run \(no config.yaml\)") as error:
            describe_runs([run / name])
        assert error.value.hint == f"It is the {name}/ folder of a run: give the run's folder, {run}."


def test_a_cached_translation_file_edited_since_is_not_used(tmp_path: Path) -> None:
    run = describe_runs([fake_run(tmp_path / "run")])[0]
    key = cache_key(run.checkpoint, ["a", "b"], decoding_settings(run.config), "cpu")
    path = cache_path(run.run_dir, key)
    write_cached(path, key, "test split", ["x y", "z"])
    assert read_cached(path, key) == ["x y", "z"]
    path.write_text(path.read_text(encoding="utf-8").replace('"x y"', '""'), encoding="utf-8")  # a line blanked
    assert read_cached(path, key) is None


def test_a_run_given_twice_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "runs" / "a"
    fake_run(run)
    with pytest.raises(NMTError, match=r"the run .*runs/a is given twice \(as .*runs/a and as .*runs/\.\./runs/a\)\.") as error:
        describe_runs([run, run.parent / ".." / "runs" / "a"])
    assert error.value.hint == "Give each RUN_DIR once."
    assert main(["evaluate", str(run), str(run), "--out", str(tmp_path / "out")]) == 2
    assert f"nmt evaluate: error: the run {run} is given twice.\nGive each RUN_DIR once." in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_the_analyses_replace_their_own_files_never_a_user_s(tmp_path: Path) -> None:
    """curve and the attention commands write STEM.json, .md and .png: over an earlier report of theirs (a STEM.json
    with its runs), never over files of the user's own of those names, and the three together or none."""
    from matplotlib.figure import Figure

    out = tmp_path / "out"
    refuse_foreign_outputs(out, "learning_curve", "nmt curve")  # nothing there yet
    write_outputs(out, "learning_curve", {"runs": {"a": 1}}, "# one\n", Figure(figsize=(1, 1)), 20)
    refuse_foreign_outputs(out, "learning_curve", "nmt curve")  # its own
    assert json.loads((out / "learning_curve.json").read_text(encoding="utf-8")) == {"runs": {"a": 1}}
    assert (out / "learning_curve.md").read_text(encoding="utf-8") == "# one\n"
    assert (out / "learning_curve.png").read_bytes().startswith(b"\x89PNG")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "learning_curve.png").write_bytes(b"my plot")
    (mine / "learning_curve.json").write_text('{"steps": [1, 2]}', encoding="utf-8")
    with pytest.raises(NMTError, match=r"holds learning_curve.json, learning_curve.png, which no nmt curve wrote"):
        refuse_foreign_outputs(mine, "learning_curve", "nmt curve")
    assert (mine / "learning_curve.png").read_bytes() == b"my plot"
    refuse_foreign_outputs(mine, "attention_checks", "nmt attention-checks")  # other names: free


def test_a_failed_write_leaves_the_earlier_outputs_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from matplotlib.figure import Figure

    import nmt.fileio

    write_outputs(tmp_path, "attention_checks", {"runs": {"a": 1}}, "# one\n", Figure(figsize=(1, 1)), 20)
    before = {path.name: path.read_bytes() for path in tmp_path.iterdir()}
    real_open = nmt.fileio.atomic_open

    def full_at_the_png(path: Path, mode: str = "w"):  # noqa: ANN202
        if str(path).endswith(".png"):
            raise OSError(28, "No space left on device")
        return real_open(path, mode)

    monkeypatch.setattr(nmt.fileio, "atomic_open", full_at_the_png)
    with pytest.raises(NMTError, match="no space left on device"):
        write_outputs(tmp_path, "attention_checks", {"runs": {"b": 2}}, "# two\n", Figure(figsize=(1, 1)), 20)
    assert {path.name: path.read_bytes() for path in tmp_path.iterdir()} == before
