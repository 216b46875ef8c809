"""Config validation, overrides and YAML round trips."""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from nmt.cli import main
from nmt.commands.arguments import use_threads
from nmt.config import SECTIONS, Config, config_from_dict, load_config, load_saved_config, save_config
from nmt.config_sections import OTHER_TOOLKIT_KEYS
from nmt.data.sources import SOURCES, check_data, load_checked_config
from nmt.errors import NMTError
from nmt.evaluation.scoring import paired_p_value
from nmt.overrides import apply_overrides
from nmt.registry import ATTENTIONS
from nmt.typed_yaml import config_diff, read_yaml
from tests.helpers import CONFIGS


def test_defaults_validate() -> None:
    config = config_from_dict({})
    assert config.model.attention == "additive"
    assert config.data.source == "bible"
    assert config.evaluation.buckets == [10, 20, 30, 40, 50, 60]


def test_unknown_key_suggests_nearest() -> None:
    with pytest.raises(
        NMTError, match=r"unknown key 'model.hiden_size' \(did you mean 'model.hidden_size'\?\)"
    ):
        config_from_dict({"model": {"hiden_size": 256}})


def test_unknown_section_suggests_nearest() -> None:
    with pytest.raises(NMTError, match=r"did you mean 'training'"):
        config_from_dict({"trainig": {}})


def refusal_of(path: Path, text: str) -> NMTError:
    """The error that loading a config file `path` holding `text` raises."""
    path.write_text(text, encoding="utf-8")
    with pytest.raises(NMTError) as error:
        load_config(path)
    return error.value


def test_a_sections_key_at_the_top_level_names_its_section_and_line(tmp_path: Path) -> None:
    """`training:` then `max_steps: 5` unindented is a top-level key: refused naming the section it belongs in,
    telling to indent it there, at the line of the file that gives it."""
    path = tmp_path / "c.yaml"
    error = refusal_of(path, "training:\nmax_steps: 5\n")
    assert error.message == (f"{path}, line 2: unknown key 'max_steps': a key of the training section, not a "
                             "section (did you mean 'training.max_steps'?).")
    assert error.hint == "Indent it under training: with spaces, as the section's other keys."


def test_a_key_under_another_section_names_the_section_it_belongs_in(tmp_path: Path) -> None:
    """beam_size under training: (or --set training.beam_size=3) is a key of decoding: it is named with its
    section, not answered with the nearest spelling among training's keys; in a run, where the run gives it."""
    path = tmp_path / "c.yaml"
    path.write_text("training:\n  beam_size: 3\n", encoding="utf-8")
    said = "unknown key 'training.beam_size': a key of the decoding section (did you mean 'decoding.beam_size'?)."
    with pytest.raises(NMTError) as error:
        load_config(path)
    assert error.value.message == f"{path}, line 2: {said}"
    assert error.value.hint == "Give it in the decoding section: each section takes only its own keys."
    with pytest.raises(NMTError) as error:
        load_config(tmp_path / "c.yaml", ["training.beam_size=3"])
    assert error.value.message.endswith(f"(with --set training.beam_size=3): {said}")
    with pytest.raises(NMTError, match=r"^unknown key 'runs.a.model.tokenize': a key of the evaluation section "
                       r"\(did you mean 'runs.a.evaluation.tokenize'\?\)"):
        config_from_dict({"runs": {"a": {"model": {"tokenize": "intl"}}}})


def test_a_section_written_key_colon_value_names_its_line_and_the_space_yaml_needs(tmp_path: Path) -> None:
    """`max_steps:5` (no space) under `training:` makes the section the text 'max_steps:5': its line is named
    with the spelling that works."""
    path = tmp_path / "c.yaml"
    path.write_text("model:\n  cell: gru\ntraining:\n  max_steps:5\n", encoding="utf-8")
    with pytest.raises(NMTError) as error:
        load_config(path)
    assert error.value.message == f"{path}, line 4: section 'training' must be a mapping of keys, got 'max_steps:5'."
    assert error.value.hint == "YAML needs a space after a key's colon: max_steps: 5."


def test_a_refused_value_names_its_line_unless_the_command_line_set_it(tmp_path: Path) -> None:
    """The line of the file is named for a key it gives, and not for one a --set replaced (the file's line would
    point at a value that is not the one refused)."""
    path = tmp_path / "c.yaml"
    path.write_text("training:\n  seed: 1\n  max_steps: 0\n", encoding="utf-8")
    with pytest.raises(NMTError, match=rf"^{re.escape(str(path))}, line 3: invalid value for 'training.max_steps'"):
        load_config(path)
    with pytest.raises(NMTError, match=rf"^{re.escape(str(path))}, line 3 \(with --set training.seed=2\): invalid"):
        load_config(path, ["training.seed=2"])
    with pytest.raises(NMTError, match=rf"^{re.escape(str(path))} \(with --set training.max_steps=-1\): invalid"):
        load_config(path, ["training.max_steps=-1"])
    # a --set below the key made its value a section: the file's line is not where that came from either
    with pytest.raises(NMTError, match=rf"^{re.escape(str(path))} \(with --set training.max_steps.x=2\): wrong type"):
        load_config(path, ["training.max_steps.x=2"])


def test_a_runs_entrys_refused_key_names_its_line_in_the_run_or_in_the_top_level_section(tmp_path: Path) -> None:
    """A key refused in one run's config is placed where the file gives it: under runs.NAME where the run sets
    it, in its top-level section where the run only inherits it; and likewise for the data source's checks."""
    path = tmp_path / "c.yaml"
    cases = [  # the file's lines after "data:\n  source: bible\nmodel:\n  cell: lstm\nruns:\n", the line, the message
        ("  a:\n    training:\n      max_stepz: 5\n", 8, "unknown key 'runs.a.training.max_stepz'"),
        ("  a:\n    model:\n      hidden_size: x\n", 8, "wrong type for 'runs.a.model.hidden_size'"),
        ("  a:\n    data: {source: bibel}\n", 7, "invalid value for 'runs.a.data.source'"),
        ("  a:\n    data:\n      files:\n        trian: x\n", 9, "unknown key 'runs.a.data.files.trian'"),
        # the run makes the top-level cell (line 4) wrong for its architecture: the key named as the file gives it
        ("  a:\n    model: {architecture: transformer}\n", 4, "runs.a: invalid value for 'model.cell'"),
    ]
    for run, line, said in cases:
        path.write_text("data:\n  source: bible\nmodel:\n  cell: lstm\nruns:\n" + run, encoding="utf-8")
        with pytest.raises(NMTError) as error:
            load_checked_config(path)
        assert error.value.message.startswith(f"{path}, line {line}: {said}"), (run, error.value.message)
    # a --set that gives the run's value: named, no line of the file
    path.write_text("runs:\n  a:\n    training: {seed: 1}\n", encoding="utf-8")
    with pytest.raises(NMTError) as error:
        load_checked_config(path, ["runs.a.training.max_steps=0"])
    assert error.value.message.startswith(f"{path} (with --set runs.a.training.max_steps=0): invalid value for "
                                          "'runs.a.training.max_steps'")


@pytest.mark.parametrize(
    ("raw", "said"),
    [
        ({"training": {"epochs": 5}}, "unknown key 'training.epochs' (did you mean 'training.max_steps'? It counts "
         "optimiser steps, a batch each, not passes over the data)."),
        ({"training": {"lr": 0.1}}, "unknown key 'training.lr' (did you mean 'training.learning_rate'?)."),
        ({"training": {"batch_size": 32}}, "unknown key 'training.batch_size' (did you mean 'training.batch_tokens'? "
         "A batch's budget of tokens, not of sentences; decoding.batch_size is the sentences translated at once)."),
        ({"data": {"src": "de"}}, "unknown key 'data.src' (did you mean 'data.src_lang'? The source language's "
         "code; data.source names the corpus)."),
        ({"data": {"trg": "en"}}, "unknown key 'data.trg' (did you mean 'data.tgt_lang'? The target language's code)."),
        ({"testing": {"beam_size": 5}}, "unknown key 'testing' (did you mean 'decoding'? It holds the beam search's "
         "settings; evaluation holds the scoring's)."),
        ({"epochs": 5}, "unknown key 'epochs' (did you mean 'training.max_steps'? It counts optimiser steps, a batch "
         "each, not passes over the data)."),
    ],
)
def test_another_toolkits_key_names_the_key_that_does_its_job_here(raw: dict, said: str) -> None:
    """JoeyNMT's, fairseq's and OpenNMT-py's names get our key and what differs, not the nearest spelling
    (data.src was answered with data.source, training.max_len with max_steps) or nothing (epochs, lr)."""
    with pytest.raises(NMTError) as error:
        config_from_dict(raw)
    assert error.value.message == said


def test_the_other_toolkits_names_point_at_keys_that_exist() -> None:
    """Each key OTHER_TOOLKIT_KEYS suggests is a section or a key of one (a renamed key would leave it stale);
    a name of it given as a source sub-section (JoeyNMT's data.src: {lang: de}) gets it too."""
    for ours, _ in OTHER_TOOLKIT_KEYS.values():
        section, _, key = ours.partition(".")
        assert section in SECTIONS and (not key or key in {f.name for f in dataclasses.fields(SECTIONS[section])})
    with pytest.raises(NMTError, match=r"unknown key 'data.src' \(did you mean 'data.src_lang'\?"):
        check_data(config_from_dict({"data": {"src": {"lang": "de"}}}).data)
    with pytest.raises(NMTError, match=r"unknown key 'training.max_len' \(did you mean 'training.max_words'\?"):
        config_from_dict({"training": {"max_len": 50}})


def test_the_sections_fields_are_typed() -> None:
    # nmt/config_sections.py's annotations reach typed_yaml's checks (their cases: tests/test_typed_yaml.py)
    with pytest.raises(NMTError, match=r"wrong type for 'evaluation.buckets\[1\]'"):
        config_from_dict({"evaluation": {"buckets": [10, "x"]}})
    with pytest.raises(NMTError, match=r"invalid value for 'model.cell': expected one of 'gru', 'lstm'"):
        config_from_dict({"model": {"cell": "rnn"}})
    rate = config_from_dict({"training": {"learning_rate": 1}}).training.learning_rate
    assert rate == 1.0 and isinstance(rate, float)
    for wrong in ("yes", 1):  # training.compile: a boolean, as YAML writes one (true / false)
        with pytest.raises(NMTError, match=r"wrong type for 'training.compile': expected bool, got "):
            config_from_dict({"training": {"compile": wrong}})
    assert config_from_dict(apply_overrides({}, ["training.compile=true"])).training.compile is True


@pytest.mark.parametrize("cutoffs", [[], [20, 10], [10, 10], [0, 10], [-5]])
def test_bad_length_buckets_are_refused_where_they_enter(cutoffs: list[int]) -> None:
    # evaluation.buckets and --buckets: make_buckets relies on this check and makes none of its own
    with pytest.raises(NMTError, match="increasing positive integers"):
        config_from_dict({"evaluation": {"buckets": cutoffs}})


def test_invalid_values_name_the_key() -> None:
    with pytest.raises(NMTError, match="training.max_steps"):
        config_from_dict({"training": {"max_steps": 0}})
    with pytest.raises(NMTError, match="evaluation.buckets"):
        config_from_dict({"evaluation": {"buckets": [20, 10]}})
    with pytest.raises(NMTError, match="data.files.train"):  # a source's keys: checked by the data layer
        check_data(config_from_dict({"data": {"source": "files"}}).data)
    # the attention types are nmt/registry.py's ATTENTIONS, the one place a new one is named
    assert list(ATTENTIONS)[:5] == ["none", "additive", "dot", "scaled_dot", "general"]
    with pytest.raises(NMTError, match=r"'model.attention': 'bahdanau' is not an attention type: expected one of "
                       rf"{', '.join(ATTENTIONS)}\."):
        config_from_dict({"model": {"attention": "bahdanau"}})


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("fixed_vector_max_ratio", 1.5, r"must be in \(0, 1\]"),
        ("attention_min_ratio", 0.0, r"must be in \(0, 1\]"),
        ("significance", 1.0, r"must be in \[1e-06, 1\)"),
        ("significance", 1e-309, r"must be in \[1e-06, 1\): a smaller one needs millions of bootstrap resamples"),
    ],
)
def test_ratios_and_significance_are_checked_against_the_interval_their_message_names(
    key: str, value: float, message: str
) -> None:
    with pytest.raises(NMTError, match=rf"evaluation.{key}.*{message}"):
        config_from_dict({"evaluation": {key: value}})
    for fine in (0.5, 1.0) if key != "significance" else (0.05, 0.5):
        assert getattr(config_from_dict({"evaluation": {key: fine}}).evaluation, key) == fine


@pytest.mark.parametrize(("section", "key", "value", "message"), [
    ("training", "learning_rate", math.inf, "must be >= 0 and finite"),
    ("training", "clip_grad_norm", -1.0, r"must be >= 0 \(0 = no clipping\)"),
    ("decoding", "max_length_ratio", math.inf, "must be > 0 and finite"),
])
def test_values_that_would_be_taken_for_another_are_refused(section: str, key: str, value: float, message: str) -> None:
    """An infinite rate, a negative clipping norm (read as none) and an infinite length ratio (which wrapped
    round to one token) are refused with their key."""
    with pytest.raises(NMTError, match=rf"'{section}.{key}'.*{message}"):
        config_from_dict({section: {key: value}})


def test_a_seed_numpy_cannot_take_is_refused_with_its_key() -> None:
    # training.seed seeds numpy's legacy generator (0 to 2**32 - 1); the bootstrap's default_rng takes any n >= 0
    for wrong in (-1, 2**32):
        with pytest.raises(NMTError, match=r"'training.seed'.*must be an integer from 0 to 4,294,967,295"):
            config_from_dict({"training": {"seed": wrong}})
    with pytest.raises(NMTError, match=r"'evaluation.bootstrap_seed'.*must be >= 0"):
        config_from_dict({"evaluation": {"bootstrap_seed": -1}})
    assert config_from_dict({"training": {"seed": 2**32 - 1}}).training.seed == 2**32 - 1
    assert config_from_dict({"evaluation": {"bootstrap_seed": 2**40}}).evaluation.bootstrap_seed == 2**40


@pytest.mark.parametrize(("significance", "fewest"), [(0.05, 40), (0.01, 200), (0.1, 20)])
def test_too_few_resamples_for_the_significance_are_refused(significance: float, fewest: int) -> None:
    # the paired bootstrap's smallest p is 2/(n+1): with fewer resamples no difference could ever count
    with pytest.raises(NMTError, match=rf"evaluation.bootstrap_samples.*must be at least {fewest} with "
                                       rf"evaluation.significance {significance:g}"):
        config_from_dict({"evaluation": {"significance": significance, "bootstrap_samples": fewest - 1}})
    evaluation = config_from_dict({"evaluation": {"significance": significance, "bootstrap_samples": fewest}}).evaluation
    assert evaluation.bootstrap_samples == fewest
    assert paired_p_value(np.zeros(fewest), np.ones(fewest)) < significance
    assert paired_p_value(np.zeros(fewest - 1), np.ones(fewest - 1)) >= significance  # one resample fewer: not below it


def test_shared_embeddings_need_one_vocabulary_and_a_transformer() -> None:
    transformer = {"architecture": "transformer", "share_embeddings": True}
    assert config_from_dict({"model": transformer}).model.share_embeddings
    with pytest.raises(NMTError, match=r"'model.share_embeddings': needs data.joint_vocab: true"):
        config_from_dict({"data": {"joint_vocab": False}, "model": transformer})
    with pytest.raises(NMTError, match=r"'runs.t.model.share_embeddings': needs data.joint_vocab: true"):
        config_from_dict({"data": {"joint_vocab": False}, "runs": {"t": {"model": transformer}}})
    with pytest.raises(NMTError, match=r"'model.share_embeddings': is a setting of model.architecture transformer"):
        config_from_dict({"model": {"share_embeddings": True}})


def test_the_fixed_vector_s_setting_is_refused_with_attention() -> None:
    """model.fixed_context chooses RNNencdec's c: with attention the decoder reads no fixed vector, and the setting
    would be ignored without a word."""
    fixed = config_from_dict({"model": {"attention": "none", "fixed_context": "both_ends"}})
    assert fixed.model.fixed_context == "both_ends" and fixed.model.bidirectional_encoder
    with pytest.raises(NMTError, match=r"'model.fixed_context': is a setting of the fixed vector \(model.attention "
                                       r"none\), not of attention additive: leave it out"):
        config_from_dict({"model": {"fixed_context": "both_ends"}})
    with pytest.raises(NMTError, match=r"runs.s: invalid value for 'model.fixed_context': is a setting of the fixed"):
        config_from_dict({"model": {"attention": "none", "fixed_context": "both_ends"},
                          "runs": {"e": {}, "s": {"model": {"attention": "additive"}}}})


def test_overrides_are_typed_like_yaml() -> None:
    raw = apply_overrides(
        {"model": {"hidden_size": 512}},
        [
            "model.hidden_size=128",
            "model.attention=none",
            "evaluation.buckets=[5, 15]",
            "data.joint_vocab=false",
        ],
    )
    config = config_from_dict(raw)
    assert config.model.hidden_size == 128
    assert config.model.attention == "none"
    assert config.evaluation.buckets == [5, 15]
    assert config.data.joint_vocab is False


def test_override_with_typo_is_refused() -> None:
    with pytest.raises(NMTError, match="did you mean 'training.max_steps'"):
        config_from_dict(apply_overrides({}, ["training.max_step=5"]))
    with pytest.raises(NMTError, match="section.key=value"):
        apply_overrides({}, ["training.max_steps"])


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    config = load_config(CONFIGS / "quick.yaml", ["model.hidden_size=64", "training.seed=7"])
    save_config(config, tmp_path / "config.yaml")
    again = load_config(tmp_path / "config.yaml")
    assert again == config
    assert config_diff(again.to_dict(), config.to_dict()) == []
    # text that the loader would read as a number (its dotless exponents: 1e3) is written quoted
    texts = load_config(CONFIGS / "quick.yaml", ['data.src_field="1e3"', "training.learning_rate=2e-4"])
    save_config(texts, tmp_path / "texts.yaml")
    assert load_saved_config(tmp_path / "texts.yaml") == texts
    assert texts.data.src_field == "1e3" and texts.training.learning_rate == 2e-4


def test_for_run_applies_run_overrides() -> None:
    config = load_config(CONFIGS / "quick.yaml")
    assert set(config.runs) == {"rnnencdec-30", "rnnsearch-30", "rnnencdec-50", "rnnsearch-50"}
    fixed, attentive = config.for_run("rnnencdec-30"), config.for_run("rnnsearch-30")
    assert fixed.model.attention == "none"
    assert attentive.model.attention == "additive"
    assert fixed.runs == {}
    # the same data, sizes and optimiser: only the attention and the fixed vector's longer training differ
    assert config_diff(fixed.to_dict(), attentive.to_dict()) == ["model.attention", "training.max_steps"]
    assert (fixed.training.max_words, config.for_run("rnnsearch-50").training.max_words) == (30, 50)
    steps = {name: config.for_run(name).training.max_steps for name in config.runs}
    assert steps == {"rnnencdec-30": 1400, "rnnsearch-30": 900, "rnnencdec-50": 1800, "rnnsearch-50": 900}


def test_a_misspelt_section_of_a_run_is_named_by_its_line_with_the_nearest_section(tmp_path: Path) -> None:
    path = tmp_path / "exp.yaml"
    assert refusal_of(path, "runs:\n  x:\n    trainng: {max_steps: 1}\n").message == (
        f"{path}, line 3: runs.x.trainng: expected one of the sections data, model, training, decoding, evaluation "
        "holding a mapping of keys (did you mean 'training'?).")
    with pytest.raises(NMTError, match=r"runs.x.True: expected one of the sections"):  # `on:`, read as a boolean
        config_from_dict({"runs": {"x": {True: {"max_steps": 1}}}})


def test_bad_run_override_is_refused_naming_where_the_key_sits(tmp_path: Path) -> None:
    with pytest.raises(NMTError, match=r"unknown key 'runs\.x\.model\.atention' \(did you mean 'runs\.x\.model\.attention'"):
        config_from_dict({"runs": {"x": {"model": {"atention": "none"}}}})
    with pytest.raises(NMTError, match=r"invalid value for 'runs\.x\.data\.vocab_size'"):
        config_from_dict({"runs": {"x": {"data": {"vocab_size": 3}}}})
    with pytest.raises(NMTError, match=r"wrong type for 'runs\.x\.training\.max_steps'"):
        config_from_dict({"runs": {"x": {"training": {"max_steps": "many"}}}})
    # and the file it is in, with the --set overrides that went into it
    path = tmp_path / "exp.yaml"
    path.write_text("runs:\n  x:\n    model: {hidden_size: 0}\n")
    with pytest.raises(NMTError, match=rf"^{re.escape(str(path))}, line 3: invalid value for 'runs\.x\.model\.hidden_size'"):
        load_config(path)
    with pytest.raises(NMTError, match=rf"^{re.escape(str(path))}, line 3 \(with --set model.cell=gru\): invalid value"):
        load_config(path, ["model.cell=gru"])


def test_a_bad_file_is_named_with_where_it_is_wrong(tmp_path: Path) -> None:
    # read_yaml's cases: tests/test_typed_yaml.py; here, that load_config goes through it
    with pytest.raises(NMTError, match="config file not found"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  hidden_size: 8\n  buckets: [10, 20\ntraining:\n  max_steps: 3\n")
    with pytest.raises(NMTError) as error:
        load_config(bad)
    assert "(while parsing a flow sequence that starts at line 3, column 12)" in error.value.message


def test_example_config_lists_and_comments_every_key() -> None:
    text = (CONFIGS / "quick.yaml").read_text()
    lines = {line.strip().split(":")[0]: line for line in text.splitlines() if ":" in line}
    for name, cls in SECTIONS.items():
        assert f"{name}:" in text
        for field in dataclasses.fields(cls):
            if field.name != getattr(cls, "SUBSECTIONS", None):  # data.sources: the sub-sections, below
                assert field.name in lines, f"configs/quick.yaml does not list {name}.{field.name}"
    data = read_yaml(CONFIGS / "quick.yaml")["data"]
    for name, source in SOURCES.items():  # each source's own keys, in its sub-section
        assert set(data[name]) == {field.name for field in dataclasses.fields(source.Settings)}, name
    sections = text.split("\nruns:")[0]
    undocumented = [line for line in sections.splitlines() if line.startswith("  ") and "#" not in line]
    assert undocumented == []


def test_every_shipped_config_is_valid() -> None:
    for path in sorted(CONFIGS.glob("*.yaml")):
        config = load_checked_config(path)
        for name in config.runs:
            config.for_run(name)


@pytest.mark.parametrize("run_first", [True, False])
def test_a_run_specific_override_wins_over_a_general_one_whatever_the_order(run_first: bool) -> None:
    general, specific = "training.max_steps=150", "runs.fixed.training.max_steps=100"
    overrides = [specific, general] if run_first else [general, specific]
    raw = {"runs": {"fixed": {"training": {"max_steps": 40}}, "attentive": {"training": {"max_steps": 50}}}}
    config = config_from_dict(apply_overrides(raw, overrides))
    assert config.training.max_steps == 150
    assert config.for_run("fixed").training.max_steps == 100
    assert config.for_run("attentive").training.max_steps == 150  # the general key still reaches other runs
    # and a run that did not set the key in the file gets it too
    raw = {"runs": {"fixed": {"model": {"attention": "none"}}}}
    assert config_from_dict(apply_overrides(raw, overrides)).for_run("fixed").training.max_steps == 100


def test_the_defaults_are_the_recipe_of_quick_yaml() -> None:
    """A config that leaves a key out gets what the project recommends and measured: quick.yaml's top
    level (data is the corpus, not a recipe; runs differ from the top level on purpose)."""
    quick, defaults = read_yaml(CONFIGS / "quick.yaml"), Config().to_dict()
    differing = {
        f"{section}.{key}"
        for section in ("model", "training", "decoding", "evaluation")
        for key, value in defaults[section].items()
        if quick[section][key] != value
    }
    assert differing == set()


def test_a_folder_an_empty_file_and_nbest_above_the_beam_say_what_they_are(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(NMTError, match=r"is a folder, not a config file"):
        load_config(tmp_path)
    (tmp_path / "empty.yaml").write_text("", encoding="utf-8")
    assert load_config(tmp_path / "empty.yaml") == Config()
    assert "empty.yaml is empty: every setting is its default" in capsys.readouterr().err
    with pytest.raises(NMTError, match=r"'decoding.nbest': 8 is above decoding.beam_size 5, .*\(--beam\)"):
        config_from_dict({"decoding": {"beam_size": 5, "nbest": 8}})


def test_an_old_config_is_refused_naming_each_moved_key_and_its_new_spelling(tmp_path: Path) -> None:
    old = tmp_path / "old.yaml"
    old.write_text(
        "data:\n  source: bible\n  bible_src: k\n  bible_tgt: '4'\n  bible_extra_translations: true\n"
        "  hf_name: wmt14\n  hf_test_split: test\n  train: corpus/train\n  valid_src: v.en\n",
        encoding="utf-8",
    )
    with pytest.raises(NMTError) as error:
        load_config(old)
    message = error.value.message
    assert message.startswith(f"{old}: keys that have moved: ")
    for was, now in [("bible_src", "bible.src"), ("bible_tgt", "bible.tgt"),
                     ("bible_extra_translations", "bible.extra_translations"), ("hf_name", "huggingface.name"),
                     ("hf_test_split", "huggingface.test_split"), ("train", "files.train"),
                     ("valid_src", "files.valid_src")]:
        assert f"'data.{was}' is now 'data.{now}'" in message
    # a huggingface config's data files move to its own sub-section; --set and runs are refused alike
    with pytest.raises(NMTError, match=r"'data.train' is now 'data.huggingface.train'"):
        config_from_dict({"data": {"source": "huggingface", "train": "a.jsonl"}})
    with pytest.raises(NMTError, match=r"--set data.hf_name=x\): keys that have moved: 'data.hf_name' is now "
                       r"'data.huggingface.name'"):
        load_config(CONFIGS / "quick.yaml", ["data.hf_name=x"])
    with pytest.raises(NMTError, match=r"'runs.r.data.bible_src' is now 'runs.r.data.bible.src'"):
        config_from_dict({"runs": {"r": {"data": {"bible_src": "4"}}}})


def test_a_run_directory_config_written_before_the_move_still_loads(tmp_path: Path) -> None:
    """A run's own config.yaml lists every key, old spelling included: it is migrated as it is read."""
    saved = {
        "data": {"source": "files", "dir": str(tmp_path / "prepared"), "bible_src": "k", "bible_tgt": "l",
                 "bible_extra_translations": False, "train": str(tmp_path / "corpus/train"), "valid": "",
                 "test": "", **{f"{s}_{side}": "" for s in ("train", "valid", "test") for side in ("src", "tgt")},
                 "hf_name": "", "hf_config": "", "hf_train_split": "train", "hf_valid_split": "validation",
                 "hf_test_split": "test", "vocab_size": 100},
        "model": {"hidden_size": 32},
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(saved), encoding="utf-8")
    config = load_saved_config(path)
    assert config.data.sources["files"]["train"] == str(tmp_path / "corpus/train")
    assert config.data.sources["bible"] == {"src": "k", "tgt": "l", "extra_translations": False}
    assert (config.data.dir, config.data.vocab_size, config.model.hidden_size) == (str(tmp_path / "prepared"), 100, 32)
    check_data(config.data)
    with pytest.raises(NMTError, match="keys that have moved"):  # a user's config is refused, not migrated
        load_config(path)
    saved["training"] = {"threads": 1}
    path.write_text(yaml.safe_dump(saved), encoding="utf-8")
    before = torch.get_num_threads()
    try:
        use_threads(None, tmp_path)  # what translate, evaluate, curve and the attention commands do first
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_a_source_sub_section_refuses_an_unknown_key_naming_it_with_the_closest_one() -> None:
    with pytest.raises(NMTError) as error:
        check_data(config_from_dict({"data": {"bible": {"scr": "k"}}}).data)
    assert error.value.message == "unknown key 'data.bible.scr' (did you mean 'data.bible.src'?)."
    assert error.value.hint.endswith("Valid keys of data.bible: src, tgt, extra_translations.")
    with pytest.raises(NMTError, match="unknown key 'data.SUBSECTIONS'"):  # a class attribute is no key
        config_from_dict({"data": {"SUBSECTIONS": "x"}})
    # in the sub-section of a source that is not data.source too, and a sub-section that names no source
    with pytest.raises(NMTError, match=r"unknown key 'data.huggingface.nmae' \(did you mean 'data.huggingface.name'"):
        check_data(config_from_dict({"data": {"huggingface": {"nmae": "x"}}}).data)
    with pytest.raises(NMTError, match=r"unknown key 'data.bibel' \(did you mean 'bible'\?\)"):
        check_data(config_from_dict({"data": {"bibel": {"src": "k"}}}).data)
    with pytest.raises(NMTError, match=r"wrong type for 'data.bible.extra_translations'"):
        check_data(config_from_dict({"data": {"bible": {"extra_translations": "yes"}}}).data)
    # a sub-section written as one value; a code YAML reads as a number (the Bible's 4, 3 and 5)
    with pytest.raises(NMTError, match=r"unknown key 'data.files'") as error:
        config_from_dict({"data": {"source": "files", "files": "corpus/train"}})
    assert error.value.hint.endswith("A sub-section of data holds keys: files: {KEY: VALUE}, not 'corpus/train'.")
    with pytest.raises(NMTError, match=r"unknown key 'data.src_lnag' \(did you mean 'data.src_lang'\?\)") as error:
        config_from_dict({"data": {"src_lnag": "en"}})  # a typo: no word of sub-sections
    assert "sub-section" not in error.value.hint
    with pytest.raises(NMTError, match=r"wrong type for 'data.bible.src': expected str, got 4 \(int\)") as error:
        check_data(config_from_dict({"data": {"bible": {"src": 4}}}).data)
    assert error.value.hint == """YAML reads 4 as a number: quoted, it is text: src: "4" in the config, --set 'data.bible.src="4"' on the command line."""
    quoted = load_checked_config(CONFIGS / "quick.yaml", ['data.bible.src="4"'])  # as the hint writes it
    assert quoted.data.sources["bible"]["src"] == "4"
    with pytest.raises(NMTError, match=r"wrong type for 'data.tgt_lang': expected str, got False \(bool\)") as error:
        config_from_dict(yaml.safe_load("data: {tgt_lang: no}"))  # Norwegian, read as a boolean
    assert error.value.hint == ("YAML reads an unquoted yes, no, on, off, true or false as a boolean (False): quoted, "
                                """it is text: tgt_lang: "no" in the config, --set 'data.tgt_lang="no"' on the command line.""")
    assert load_config(CONFIGS / "quick.yaml", ['data.tgt_lang="no"']).data.tgt_lang == "no"
    with pytest.raises(NMTError, match=r"'data.source': 'file' is not a corpus source \(did you mean 'files'"):
        check_data(config_from_dict({"data": {"source": "file"}}).data)


def test_a_command_checks_the_source_keys_of_each_run_before_any_work(tmp_path: Path) -> None:
    path = tmp_path / "exp.yaml"
    path.write_text("data:\n  source: files\n  files: {train: corpus/train}\n"
                    "runs:\n  a: {}\n  b: {data: {files: {valid_src: v.en}}}\n", encoding="utf-8")
    assert load_config(path).for_run("b").data.sources["files"] == {"train": "corpus/train", "valid_src": "v.en"}
    with pytest.raises(NMTError, match=rf"^{re.escape(str(path))}: 'runs.b.data.files.valid_src' is given without "
                       r"'runs.b.data.files.valid_tgt'"):
        load_checked_config(path)


def test_only_runs_keeps_the_runs_named_in_their_order_and_names_an_unknown_one() -> None:
    config = config_from_dict({"runs": {"a": {}, "b": {"model": {"attention": "none"}}, "c": {}}})
    chosen = config.only_runs(["c", "b", "c"], "x.yaml")
    assert list(chosen.runs) == ["c", "b"] and chosen.runs["b"] == {"model": {"attention": "none"}}
    assert list(config.runs) == ["a", "b", "c"]  # the config itself unchanged
    with pytest.raises(NMTError) as error:
        config.only_runs(["b", "rnnserch", "d"], "x.yaml")
    assert (error.value.message, error.value.hint) == ("--runs rnnserch d: not a run of x.yaml.", "Its runs: a, b, c.")
    with pytest.raises(NMTError) as error:  # the nearest run suggested, as for --set runs.NAME...
        config_from_dict({"runs": {"rnnencdec-50": {}, "rnnsearch-50": {}}}).only_runs(["rnnserch-50"], "x.yaml")
    assert error.value.message == "--runs rnnserch-50: not a run of x.yaml (did you mean 'rnnsearch-50'?)."


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("..", "runs: '..' cannot name a run: it is also the name of the run's folder (runs/..) and files."),
        ('"x/y"', "runs: 'x/y' cannot name a run: it is also the name of the run's folder (runs/x/y) and files."),
        ("50", "runs: a run's name must be text, not 50 (int)."),
        ("null", "runs: a run's name must be text, not None (NoneType)."),
        ("v1.5", "runs: 'v1.5' cannot name a run: --set runs.v1.5.training.max_steps=... would read the run's name "
                 "as 'v1'."),
    ],
)
def test_a_run_name_that_cannot_name_its_folder_is_refused_before_any_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], name: str, said: str
) -> None:
    # `..` put the run's config.yaml and checkpoints over the experiment's own files; a number was a traceback
    monkeypatch.chdir(tmp_path)
    Path("exp.yaml").write_text(  # a corpus not there: were the name let through, no work would follow either
        f"data: {{source: files, files: {{train: nope}}}}\nruns:\n  a: {{}}\n  {name}: {{model: {{attention: none}}}}\n",
        encoding="utf-8",
    )
    for command in (["experiment", "exp.yaml", "--out", "out"], ["train", "exp.yaml", "--run-name", "a"]):
        assert main(command) == 2
        assert capsys.readouterr().err == f"nmt {command[0]}: error: exp.yaml: {said}\n" + (
            "Name each run with letters, digits, '-' and '_' (quote a number: '50': {...}).\n" if "text" in said
            else "Use letters, digits, '-' and '_'.\n" if "--set" in said
            else "Use letters, digits, '-' and '_', not starting with '.'.\n"
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp.yaml"]


@pytest.mark.parametrize(("overrides", "message"), [
    (["training.threads=99999999999"], r"'training.threads': must be <= 1024"),
    (["decoding.alpha=.inf"], r"'decoding.alpha': must be >= 0 and finite"),
    (["decoding.beam_size=100000000000000000000"],
     r"'decoding.beam_size': 100000000000000000000 is too large \(at most 9,223,372,036,854,775,807\)"),
    ([f"training.learning_rate=1{'0' * 400}"], r"wrong type for 'training.learning_rate': expected float"),
    ([f"training.max_steps=1{'0' * 5000}"], r"--set training.max_steps=\.\.\.: a number too long to read \(Exceeds "
                                            r"the limit \(4300 digits\)"),
])
def test_values_beyond_what_torch_or_python_can_hold_are_refused_with_their_key(
    overrides: list[str], message: str
) -> None:
    """Each crashed with a traceback (or torch's segmentation fault, for threads) once a command used it."""
    with pytest.raises(NMTError, match=message):
        load_config(CONFIGS / "quick.yaml", overrides)


def test_a_config_with_a_number_too_long_to_read_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "long.yaml"
    path.write_text(f"training:\n  max_steps: 1{'0' * 5000}\n", encoding="utf-8")
    with pytest.raises(NMTError, match=rf"^{re.escape(str(path))}: a number too long to read"):
        read_yaml(path)


def test_threads_beyond_any_machine_are_refused_as_the_flag() -> None:
    with pytest.raises(NMTError, match=r"^--threads 5000: give 0 \(torch's default, one per core\) or a count up to 1024"):
        use_threads(5000, Path("no-run"))


@pytest.mark.parametrize("value", ["[]", "0", '""', "false"])
def test_a_run_that_is_no_mapping_is_refused_not_taken_as_empty(value: str) -> None:
    """`a: []` trained the top level's settings as run a; only `a:` alone (null) means that."""
    with pytest.raises(NMTError, match=r"^runs\.a must be a mapping of sections"):
        config_from_dict({"runs": {"a": yaml.safe_load(value), "b": None}})
    config = config_from_dict({"runs": {"b": None}})
    assert config.for_run("b").model == config.model


def test_a_run_that_is_no_mapping_is_named_by_its_line_with_what_to_give(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("training: {seed: 1}\nruns:\n  a: 3\n", encoding="utf-8")
    with pytest.raises(NMTError) as error:
        load_config(path)
    assert error.value.message == f"{path}, line 3: runs.a must be a mapping of sections, got 3 (int)."
    assert error.value.hint.startswith("Give the run's settings by section, e.g. runs: {a: {model: {attention: none}}}")


@pytest.mark.parametrize("value", ["[]", "0", '""', "false"])
def test_runs_that_are_no_mapping_are_refused_at_their_line_not_taken_as_none(value: str, tmp_path: Path) -> None:
    """`runs: []` made an experiment say the config had no runs section, and `nmt train` train the top level."""
    path = tmp_path / "c.yaml"
    path.write_text(f"training: {{max_steps: 5}}\nruns: {value}\n", encoding="utf-8")
    with pytest.raises(NMTError) as error:
        load_config(path)
    assert error.value.message == (f"{path}, line 2: 'runs' must map run names to section overrides, e.g. rnnsearch: "
                                   f"{{model: {{attention: additive}}}}; got {yaml.safe_load(value)!r} "
                                   f"({type(yaml.safe_load(value)).__name__}).")
    path.write_text("training: {max_steps: 5}\nruns:\n", encoding="utf-8")
    assert load_config(path).runs == {}


def test_a_damaged_run_config_is_named_by_its_line_and_not_to_be_mended_with_set(tmp_path: Path) -> None:
    """translate, evaluate and the rest refuse a --set of a run's training keys: the hint says what does mend it."""
    path = tmp_path / "config.yaml"
    mend = "A run's config.yaml is written by its training and read as it is: undo the edit that broke it, or train the run again."
    path.write_text("model:\n  hidden_size: 32\ntraining:\n  max_steps: -1\n", encoding="utf-8")
    with pytest.raises(NMTError) as error:
        load_saved_config(path)
    assert (error.value.message, error.value.hint) == (
        f"{path}, line 4: invalid value for 'training.max_steps': must be >= 1.", mend)
    assert not error.value.key  # no command's shorthand offered for it
    path.write_text("- 1\n", encoding="utf-8")
    with pytest.raises(NMTError) as error:
        load_saved_config(path)
    assert error.value.message == f"{path}: the top level must be a mapping of sections, got list."  # named once
