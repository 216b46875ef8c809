"""The command line: subcommands listed, user mistakes as one paragraph and exit status 2."""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from nmt import __version__
from nmt.cli import COMMANDS, build_parser, main
from nmt.commands import arguments
from nmt.compare.runs import RunInfo
from nmt.config import config_from_dict, load_config, override_sections, save_config
from nmt.evaluation import testset
from tests.helpers import CONFIGS, fake_run, reverse_task_config


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (subparsers,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(subparsers.choices)


def test_the_parser_has_exactly_the_documented_subcommands() -> None:
    documented = list(COMMANDS)
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `nmt ([a-z-]+)[ `]", readme, flags=re.MULTILINE)  # the README's table of commands
    assert sorted(rows) == sorted(documented)  # a row for every command, none for a command that is gone


def test_every_argument_of_every_subcommand_has_help() -> None:
    parser = build_parser()
    (subparsers,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for name, sub in subparsers.choices.items():
        for action in sub._actions:
            assert action.help, f"nmt {name}: {action.dest} has no help"
    translate_help = subparsers.choices["translate"].format_help()
    assert "early_stopping_metric" in translate_help and "best.pt" in translate_help
    # a shorthand names its value after its flag, not after the --set list it joins
    assert not [name for name, sub in subparsers.choices.items() if "OVERRIDES" in sub.format_help()]


def test_the_bucketing_defaults_in_the_help_are_those_each_command_takes() -> None:
    """evaluate's --buckets and --by default to the first run's evaluation settings (a run trained with other
    cutoffs is bucketed by them), as its help says, not score's fixed 10,...,60."""
    helps = {name: " ".join(sub.format_help().split()) for name, sub in _subparsers(build_parser()).items()}
    assert "length cutoffs (default: the first run's evaluation.buckets, 10,20,30,40,50,60 unless set)" in helps["evaluate"]
    assert "length (default: the first run's evaluation.by, source unless set)" in helps["evaluate"]
    assert "length cutoffs (default: 10,20,30,40,50,60); or auto:" in helps["score"]
    assert "length (default: source with --src, else reference)" in helps["score"]


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"nmt {__version__}"


@pytest.mark.parametrize("argv", [["translate", "runs/a", "in.txt"], ["train", "c.yaml", "--device", "cpu"]])
def test_an_argument_the_command_does_not_take_is_refused_with_the_command_s_usage(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: nmt {argv[0]} [-h]")
    assert err.endswith(f"nmt {argv[0]}: error: unrecognized arguments: {' '.join(argv[2:])}\n")


def test_the_help_describes_the_three_models_of_the_toolkit(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    description = " ".join(capsys.readouterr().out.split())  # argparse wraps it to the terminal's width
    assert all(model in description for model in ("RNNencdec", "RNNsearch", "Transformer"))


def test_config_typo_is_one_paragraph_without_traceback(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("model:\n  hiden_size: 8\n")
    result = subprocess.run(
        [sys.executable, "-m", "nmt", "prepare", str(config)], capture_output=True, text=True
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "unknown key 'model.hiden_size' (did you mean 'model.hidden_size'?)" in result.stderr


def test_bad_override_value(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "configs/quick.yaml", "--set", "training.max_steps=many"]) == 2
    assert "wrong type for 'training.max_steps'" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["train", "prepare"])
def test_runs_preparing_their_data_differently_into_one_data_dir_are_refused_by_every_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    # training run 'b' alone rebuilt the folder run 'a' was trained on (nmt experiment refused the config already)
    config = tmp_path / "c.yaml"
    config.write_text(f"data: {{dir: {tmp_path / 'prepared'}}}\nruns: {{a: {{}}, b: {{data: {{vocab_size: 100}}}}}}\n",
                      encoding="utf-8")
    argv = [command, str(config), *(["--run-name", "b", "--run-dir", str(tmp_path / "run")] if command == "train" else [])]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert (f"runs 'a' and 'b' prepare their data differently (data.vocab_size) into the one data.dir "
            f"{tmp_path / 'prepared'}: each would rebuild it for itself") in err
    assert "runs.b.data.dir" in err and sorted(p.name for p in tmp_path.iterdir()) == ["c.yaml"]


def test_run_selector_has_a_torchrun_safe_name_and_keeps_the_old_one() -> None:
    for flag in ("--run-name", "--run"):
        assert build_parser().parse_args(["train", "c.yaml", flag, "rnnsearch-50"]).run == "rnnsearch-50"


def test_unknown_run_name_lists_the_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "configs/quick.yaml", "--run-name", "rnnsaerch-50"]) == 2
    assert capsys.readouterr().err == (  # the nearest suggested, as for --set runs.NAME and --runs
        "nmt train: error: unknown run 'rnnsaerch-50' (did you mean 'rnnsearch-50'?).\n"
        "The config defines: rnnencdec-30, rnnsearch-30, rnnencdec-50, rnnsearch-50.\n"
    )


def test_a_misspelt_run_in_set_is_refused_and_nothing_is_trained(tmp_path: Path) -> None:
    raw = reverse_task_config(tmp_path / "data", n_train=60, training={"max_steps": 2}).to_dict()
    config = tmp_path / "one.yaml"
    config.write_text(yaml.safe_dump({**raw, "runs": {"a": {"training": {"validate_every": 2}}}}), encoding="utf-8")
    out = tmp_path / "out"
    result = subprocess.run(
        [sys.executable, "-m", "nmt", "experiment", str(config), "--out", str(out), "--jobs", "1",
         "--set", "runs.nosuch.training.max_steps=5"],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"{config}: --set runs.nosuch.training.max_steps=5: the config has no run 'nosuch'." in result.stderr
    assert "Its runs: a." in result.stderr
    assert not out.exists()


def test_missing_config_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["experiment", str(tmp_path / "missing.yaml")]) == 2
    assert "config file not found" in capsys.readouterr().err


def test_evaluate_src_without_ref(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["evaluate", str(tmp_path), "--src", "x.en"]) == 2
    assert "--src and --ref go together" in capsys.readouterr().err


@pytest.mark.parametrize("split", [["--split", "valid"], ["--set", "evaluation.split=valid"]])
def test_evaluate_refuses_a_split_beside_src_and_ref(
    split: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["evaluate", str(tmp_path), "--src", "x.en", "--ref", "x.fr", *split]) == 2
    assert "give either --split (evaluation.split) or --src/--ref" in capsys.readouterr().err


def test_hints_fit_the_command(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    # translate takes the run as its first argument, not as --run-dir
    hyp = tmp_path / "hyp.txt"
    hyp.write_text("a b\n")
    assert main(["translate", str(tmp_path / "nope"), "-i", str(hyp)]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'nope'} does not exist" in err and "--run-dir" not in err
    assert "RUN_DIR" in err and "nmt train" in err
    # an existing file given as the run is called a file, with exit code 2 and no traceback
    assert main(["evaluate", str(hyp)]) == 2
    err = capsys.readouterr().err
    assert f"nmt evaluate: error: {hyp} is a file, not a run directory." in err and "Traceback" not in err
    # score has no run: a decoding setting is refused without a word about retraining
    assert main(["score", str(hyp), "--ref", str(hyp), "--set", "decoding.beam_size=3"]) == 2
    err = capsys.readouterr().err
    assert "--set decoding.beam_size=3: nmt score takes only evaluation.* keys" in err
    assert "train" not in err and "nmt translate RUN_DIR --set decoding.beam_size=3" in err
    assert main(["score", str(hyp), "--ref", str(hyp), "--set", "model.hidden_size=8"]) == 2
    assert "(nmt train CONFIG --set model.hidden_size=8)" in capsys.readouterr().err
    # one file of a pair names what is missing
    config = tmp_path / "c.yaml"
    config.write_text("data:\n  source: files\n  files:\n    train: corpus/train\n    test_src: test.en\n")
    assert main(["prepare", str(config)]) == 2
    err = capsys.readouterr().err
    assert "'data.files.test_src' is given without 'data.files.test_tgt'" in err and "invalid value" not in err
    assert "Give data.files.test_tgt" in err


def test_train_without_a_run_name_says_what_it_trains(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import nmt.training.trainer

    trained: list[tuple[str, str, int]] = []
    monkeypatch.setattr(
        nmt.training.trainer, "train",
        lambda config, run_dir, resume: trained.append((config.model.attention, str(run_dir), config.training.max_words)),
    )
    assert main(["train", "configs/quick.yaml"]) == 0
    err = capsys.readouterr().err
    assert "rnnencdec-30, rnnsearch-30, rnnencdec-50, rnnsearch-50" in err
    assert "top-level settings (model.attention additive, training.max_words 0) into runs/quick" in err
    assert "nmt train configs/quick.yaml --run-name rnnencdec-30" in err
    assert main(["train", "configs/quick.yaml", "--run-name", "rnnencdec-30"]) == 0
    assert capsys.readouterr().err == ""
    assert trained == [("additive", "runs/quick", 0), ("none", "runs/rnnencdec-30", 30)]


def test_train_refuses_a_run_dir_whose_config_yaml_is_the_config_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`nmt train config.yaml --run-dir . [--resume]` in the folder of one's own config.yaml is refused before
    anything is written (the run writes its resolved config.yaml there: comments and runs: were lost), while a
    run's own config.yaml resumes that run."""
    import nmt.training.trainer

    trained: list[str] = []
    monkeypatch.setattr(nmt.training.trainer, "train", lambda config, run_dir, resume: trained.append(str(run_dir)))
    monkeypatch.chdir(tmp_path)
    mine = "# my settings\ntraining: {max_steps: 5}\nruns: {a: {model: {attention: none}}}\n"
    Path("config.yaml").write_text(mine, encoding="utf-8")
    for resume in ([], ["--resume"]):
        assert main(["train", "config.yaml", "--run-name", "a", "--run-dir", ".", *resume]) == 2
        assert capsys.readouterr().err == (
            "nmt train: error: config.yaml is the config.yaml of --run-dir ., where the run writes its own (the "
            "settings it resolves): your config would be replaced.\nGive the run a folder of its own (by default "
            "runs/NAME), or copy the config out of that folder first; nothing was written.\n"
        )
    assert Path("config.yaml").read_text(encoding="utf-8") == mine and trained == []
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    Path("run/config.yaml").write_text("training: {max_steps: 5}\n", encoding="utf-8")
    assert main(["train", "run/config.yaml", "--run-dir", "run", "--resume"]) == 0
    assert trained == ["run"]


def test_every_command_that_runs_a_model_takes_threads_with_one_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    commands = _subparsers(build_parser())
    with_threads = {
        name: action
        for name, sub in commands.items()
        for action in sub._actions
        if "--threads" in action.option_strings
    }
    assert set(with_threads) == {
        "train", "translate", "evaluate", "curve", "experiment", "attention-checks", "attention-scaling"
    }  # every command that runs a model
    for name, threads in with_threads.items():
        assert threads.default == ([] if name in ("train", "experiment") else None)  # [] : a setting, below
        assert "Without --threads, every command that runs a model uses the run's training.threads" in threads.help
    # train and experiment: --threads N is the config key training.threads, which the run records
    import nmt.training.trainer

    seen: list[int] = []
    monkeypatch.setattr(nmt.training.trainer, "train", lambda config, run_dir, resume: seen.append(config.training.threads))
    assert main(["train", "configs/quick.yaml", "--run-name", "rnnencdec-30", "--threads", "1"]) == 0
    assert main(["train", "configs/quick.yaml", "--run-name", "rnnencdec-30", "--set", "training.threads=3"]) == 0
    assert seen == [1, 3]
    # a setting like any other: of --threads and --set training.threads, the later one wins
    seen.clear()
    assert main(["train", "configs/quick.yaml", "--threads", "1", "--set", "training.threads=3"]) == 0
    assert main(["train", "configs/quick.yaml", "--set", "training.threads=3", "--threads", "1"]) == 0
    assert seen == [3, 1]


def test_the_parser_has_one_command_per_line_of_the_table_and_builds_only_the_one_named() -> None:
    commands = _subparsers(build_parser())
    assert all(any(a.option_strings == ["-h", "--help"] for a in sub._actions) for sub in commands.values())
    assert all(len(sub._actions) > 1 for sub in commands.values())  # each command declared its arguments
    only_score = _subparsers(build_parser("score"))
    assert [name for name, sub in only_score.items() if len(sub._actions) > 1] == ["score"]
    assert list(only_score) == list(COMMANDS)  # `nmt --help` still lists every command


def test_help_of_a_command_that_runs_no_model_does_not_load_torch() -> None:
    commands = ["score", "evaluate", "translate", "experiment", "curve"]
    helps = [["--help"]] + [[name, "--help"] for name in [*commands, "attention-checks", "attention-scaling"]]
    code = (
        f"import sys\nfrom nmt.cli import main\nfor argv in {helps!r}:\n"
        "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
        "print(*(m for m in ('torch', 'numpy', 'matplotlib', 'sacrebleu') if m in sys.modules), file=sys.stderr)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stderr.split() == []


@pytest.mark.parametrize(
    ("argv", "key", "value"),
    [
        (["translate", "r", "--beam", "3"], ("decoding", "beam_size"), 3),
        (["translate", "r", "--nbest", "2", "--beam", "2"], ("decoding", "nbest"), 2),
        (["translate", "r", "--batch-size", "7"], ("decoding", "batch_size"), 7),
        (["evaluate", "r", "--beam", "4"], ("decoding", "beam_size"), 4),
        (["evaluate", "r", "--buckets", "5,15"], ("evaluation", "buckets"), [5, 15]),
        (["evaluate", "r", "--by", "reference"], ("evaluation", "by"), "reference"),
        (["evaluate", "r", "--split", "valid"], ("evaluation", "split"), "valid"),
        (["score", "h", "--ref", "r", "--buckets", "8"], ("evaluation", "buckets"), [8]),
        (["score", "h", "--ref", "r", "--by", "reference"], ("evaluation", "by"), "reference"),
    ],
)
def test_a_shorthand_writes_the_setting_that_set_writes(argv: list[str], key: tuple[str, str], value: object) -> None:
    def setting(overrides: list[str]) -> object:
        config = override_sections(config_from_dict({}), overrides, ("decoding", "evaluation"), "nmt test")
        return getattr(getattr(config, key[0]), key[1])

    overrides = build_parser().parse_args(argv).overrides
    assert setting(overrides) == value
    assert setting([f"{key[0]}.{key[1]}={value}"]) == value  # --set section.key=[5, 15]


def test_of_a_shorthand_and_set_of_one_key_the_later_wins() -> None:
    def beam(*flags: str) -> int:
        overrides = build_parser().parse_args(["translate", "r", *flags]).overrides
        return override_sections(config_from_dict({}), overrides, ("decoding",), "nmt translate").decoding.beam_size

    assert beam("--beam", "3", "--set", "decoding.beam_size=7") == 7
    assert beam("--set", "decoding.beam_size=7", "--beam", "3") == 3
    assert beam("--beam", "3", "--beam", "2") == 2
    assert beam() == 5  # neither: the run's own setting (here the default)
    by = build_parser().parse_args(["evaluate", "r", "--by", "reference", "--set", "evaluation.by=source"]).overrides
    assert override_sections(config_from_dict({}), by, ("evaluation",), "nmt evaluate").evaluation.by == "source"


@pytest.mark.parametrize(
    ("parse", "text", "message"),
    [
        (arguments.steps, "6OO", "expected comma-separated step numbers, got '6OO'"),
        (arguments.steps, ",", "expected step numbers, e.g. 600,900"),
        (arguments.steps, "20,,40", "expected comma-separated step numbers, got '20,,40' (an empty item between commas)"),
        (arguments.steps, "20,40,", "expected comma-separated step numbers, got '20,40,' (an empty item between commas)"),
        (arguments.steps, "0,600", "expected comma-separated step numbers of 1 or more, got '0,600'"),
        (arguments.steps, "600,-300", "expected comma-separated step numbers of 1 or more, got '600,-300'"),
        (arguments.buckets, "10,,20", "expected comma-separated integers, got '10,,20' (an empty item between commas)"),
        (arguments.buckets, "10;20", "expected comma-separated integers, got '10;20'"),
        (arguments.buckets, " ", "expected at least one length cutoff, e.g. 10,20,30,40,50,60"),
    ],
)
def test_a_list_of_integers_is_refused_in_words_of_its_own(
    parse: Callable[[str], list[int]], text: str, message: str
) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as refusal:
        parse(text)
    assert str(refusal.value) == message


def test_a_shorthand_out_of_range_names_the_setting(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    hyp = tmp_path / "hyp.txt"
    hyp.write_text("a b\n")
    assert main(["score", str(hyp), "--ref", str(hyp), "--buckets", "20,10"]) == 2
    assert "invalid value for 'evaluation.buckets'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "flag", "message"),
    [
        (["score", "HYP", "--ref", "HYP", "--buckets", "20,10"], "--buckets", "--buckets 20,10: invalid value for "
         "'evaluation.buckets': must be a non-empty list of increasing positive integers"),
        (["evaluate", "RUN", "--buckets", "0"], "--buckets", "--buckets 0: invalid value for 'evaluation.buckets'"),
        (["evaluate", "RUN", "--beam", "0"], "--beam", "--beam 0: invalid value for 'decoding.beam_size': must be >= 1."),
        (["translate", "RUN", "--nbest", "0"], "--nbest", "--nbest 0: invalid value for 'decoding.nbest': must be >= 1."),
        (["translate", "RUN", "--beam", "2", "--nbest", "3"], "--nbest",
         "--nbest 3: invalid value for 'decoding.nbest': 3 is above decoding.beam_size 2"),
        (["translate", "RUN", "--batch-size", "0"], "--batch-size",
         "--batch-size 0: invalid value for 'decoding.batch_size'"),
        (["experiment", "configs/quick.yaml", "--threads", "-1"], "--threads",
         "configs/quick.yaml: --threads -1: invalid value for 'training.threads': must be >= 0."),
    ],
)
def test_a_bad_value_from_a_shorthand_flag_names_the_flag_and_says_to_fix_it(
    argv: list[str], flag: str, message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    hyp, run = tmp_path / "hyp.txt", fake_run(tmp_path / "run")
    hyp.write_text("a b\n")
    argv = [{"HYP": str(hyp), "RUN": str(run)}.get(word, word) for word in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"error: {message}" in err
    assert f"Fix the value of {flag} on the command line" in err and "with --set" not in err


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (["score", "HYP", "--ref", "HYP", "--set", "evaluation.buckets=10,20"], "A list is written in brackets: "
         "[10, 20], quoted for the shell in a --set: --set 'evaluation.buckets=[10, 20]'. --buckets BUCKETS sets it too."),
        (["score", "HYP", "--ref", "HYP", "--set", "evaluation.by=src"],
         "Fix the value of --set evaluation.by on the command line. --by {source,reference} sets it too."),
        (["experiment", "configs/quick.yaml", "--set", "training.threads=-1"],
         "Fix it in the config or with --set. --threads N sets it too."),
        # no shorthand for the key: the hint alone
        (["score", "HYP", "--ref", "HYP", "--set", "evaluation.bootstrap_samples=1"],
         "Fix the value of --set evaluation.bootstrap_samples on the command line.\n"),
    ],
)
def test_a_key_refused_through_set_names_the_commands_shorthand_for_it(
    argv: list[str], hint: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    hyp = tmp_path / "hyp.txt"
    hyp.write_text("a b\n")
    assert main([str(hyp) if word == "HYP" else word for word in argv]) == 2
    assert hint in capsys.readouterr().err


@pytest.mark.parametrize("given", [["--buckets", "auto"], ["--set", "evaluation.buckets=auto"]])
def test_buckets_auto_outside_nmt_score_says_it_is_nmt_scores_and_what_is_taken(
    given: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """nmt evaluate refuses `auto` (nmt score sizes buckets from its files) by the flag and by --set alike,
    in the config's words: what auto is for and the cutoffs it takes instead, not a wrong type."""
    assert main(["evaluate", str(fake_run(tmp_path / "run")), *given]) == 2
    err = capsys.readouterr().err
    assert ("invalid value for 'evaluation.buckets': auto (buckets sized from the data) is for nmt score only "
            "(--buckets auto); other commands take length cutoffs, a non-empty list of increasing positive "
            "integers, e.g. [10, 20, 30] (--buckets 10,20,30).") in err
    assert "expected" not in err


def test_a_bad_value_from_set_says_to_fix_the_set_or_the_config_it_came_with(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A refused --set value is to be fixed on the command line where the command reads no config (score), in
    the config or with --set where it reads one (train)."""
    hyp = tmp_path / "hyp.txt"
    hyp.write_text("a b\n")
    # the later of a flag and --set gives the value: here --set, so the error is about it
    assert main(["score", str(hyp), "--ref", str(hyp), "--buckets", "10", "--set", "evaluation.buckets=[0]"]) == 2
    err = capsys.readouterr().err
    assert "error: invalid value for 'evaluation.buckets'" in err
    assert "Fix the value of --set evaluation.buckets on the command line." in err and "config" not in err
    # a flag whose value is fine is shown as typed beside the --set that is not
    assert main(["train", "configs/quick.yaml", "--threads", "1", "--set", "training.max_steps=0"]) == 2
    err = capsys.readouterr().err
    assert "configs/quick.yaml (with --threads 1 --set training.max_steps=0): invalid value" in err
    assert "Fix it in the config or with --set." in err


def test_evaluate_beam_1_on_a_run_with_nbest_2_scores_the_best_translation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import nmt.compare.evaluate

    run = fake_run(tmp_path / "run", beam_size=3)
    config = load_config(run / "config.yaml")
    config.decoding.nbest = 2  # what translate writes by default; evaluate scores the best one only
    save_config(config, run / "config.yaml")
    text = tmp_path / "text.txt"
    text.write_text("a b c\nd e\n", encoding="utf-8")
    beams: list[int] = []

    def translated(run: RunInfo, test_set: testset.TestSet, device: str) -> tuple[list[str], Path, bool]:
        beams.append(run.config.decoding.beam_size)
        return list(test_set.references), tmp_path / "hyps.txt", True

    monkeypatch.setattr(nmt.compare.evaluate, "translate_cached", translated)
    monkeypatch.setattr(nmt.compare.evaluate, "describe_checkpoint", lambda path: "best.pt (step 1)")
    argv = ["evaluate", str(run), "--src", str(text), "--ref", str(text), "--out", str(tmp_path / "o"), "--beam", "1"]
    assert main(argv) == 0
    assert beams == [1]


def test_train_names_its_default_run_dir_and_how_to_resume_after_ctrl_c(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "runs/<run name>" in _subparsers(build_parser())["train"].format_help()

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    import nmt.training.trainer

    monkeypatch.setattr(nmt.training.trainer, "train", interrupted)
    monkeypatch.chdir(tmp_path)
    assert main(["train", str(CONFIGS / "quick.yaml"), "--run-name", "rnnsearch-50"]) == 130
    assert "runs/rnnsearch-50: stopped before the run was written; the same command" in capsys.readouterr().err
    (tmp_path / "runs" / "rnnsearch-50").mkdir(parents=True)
    (tmp_path / "runs" / "rnnsearch-50" / "config.yaml").write_text("{}\n", encoding="utf-8")  # the run is written
    assert main(["train", str(CONFIGS / "quick.yaml"), "--run-name", "rnnsearch-50", "--resume"]) == 130
    assert "runs/rnnsearch-50: the same command with --resume continues it" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "after"),
    [
        (["experiment", str(CONFIGS / "quick.yaml")], "Run the same command again to continue"),
        (["evaluate", "run"], "the same command starts over, re-using the translations of the runs it finished"),
        (["curve", "run"], "re-using the translations of the checkpoints it finished"),
        (["translate", "run"], None),  # starts over: nothing to promise
    ],
)
def test_an_interrupted_command_says_what_running_it_again_does(
    argv: list[str], after: str | None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(args: argparse.Namespace) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(importlib.import_module(COMMANDS[argv[0]][0]), "run", interrupted)
    assert main(argv) == 130
    message = capsys.readouterr().err.strip()
    assert message.startswith(f"nmt {argv[0]}: interrupted.")
    assert (after in message) if after else message == f"nmt {argv[0]}: interrupted."


def test_a_reader_that_leaves_stdout_ends_the_command_quietly_with_sigpipes_status(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # `nmt score ... | head` once head has exited: no "Broken pipe" error, the status of a filter that SIGPIPE
    # ended; a broken pipe of a file the command writes (-o a named pipe) is still an error naming it
    ref, hyp = tmp_path / "ref.txt", tmp_path / "hyp.txt"
    ref.write_text("a b c\nd e f\n", encoding="utf-8")
    hyp.write_text("a b c\nd e\n", encoding="utf-8")
    read_end, write_end = os.pipe()
    os.close(read_end)
    with open(write_end, "w", encoding="utf-8") as stdout:
        monkeypatch.setattr(sys, "stdout", stdout)
        assert main(["score", str(hyp), "--ref", str(ref), "--out", str(tmp_path / "out")]) == 141
        monkeypatch.undo()
    assert capsys.readouterr().err == ""
    assert (tmp_path / "out" / "report.md").is_file()  # written before the table was printed

    def broken_pipe_of_a_file(args: argparse.Namespace) -> None:
        raise BrokenPipeError(errno.EPIPE, "Broken pipe", str(tmp_path / "fifo"))

    monkeypatch.setattr(importlib.import_module("nmt.commands.score"), "run", broken_pipe_of_a_file)
    read_end, write_end = os.pipe()  # stdout a pipe still read
    with open(write_end, "w", encoding="utf-8") as stdout, open(read_end, encoding="utf-8"):
        monkeypatch.setattr(sys, "stdout", stdout)
        assert main(["score", str(ref), "--ref", str(ref)]) == 2
        monkeypatch.undo()
    assert capsys.readouterr().err.startswith(f"nmt score: error: {tmp_path / 'fifo'}: Broken pipe\n")
