"""nmt/overrides.py: `--set` texts parsed as YAML, applied to a raw config (every run that sets the key, a
run's own override winning), and a run override that names no run of the config refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from nmt.config import load_config
from nmt.errors import NMTError
from nmt.overrides import apply_overrides, parse_override, sets_key


def test_overrides_are_parsed_as_yaml() -> None:
    assert parse_override("a.b=3") == (["a", "b"], 3)
    assert parse_override("a.b=[5, 15]") == (["a", "b"], [5, 15])
    assert parse_override("a.b=false") == (["a", "b"], False)
    assert parse_override("a.b=null") == (["a", "b"], None)
    assert parse_override("a.b=") == (["a", "b"], "")
    assert parse_override("a.b=x=y") == (["a", "b"], "x=y")  # only the first '=' splits
    assert parse_override(" runs.r.model.size =8") == (["runs", "r", "model", "size"], 8)
    with pytest.raises(NMTError, match="expected section.key=value"):
        parse_override("a.b")
    for text in ("size=3", "training..max_steps=2", ".training.max_steps=2", "training.max_steps.=2", "a. .b=1"):
        with pytest.raises(NMTError, match="the key must name a section and a key, each part between dots named"):
            parse_override(text)
    with pytest.raises(NMTError) as error:  # one line, where in the value, PyYAML's words for the end its own
        parse_override("a.b=[1")
    assert error.value.message == ("--set 'a.b=[1': the value is not valid YAML at character 3: expected ',' or ']', "
                                   "but got the end of the value.")
    with pytest.raises(NMTError, match=r"^--set 'a.b=x\n y: 1': the value is not valid YAML at character 3 of its line 2: "
                                       r"mapping values are not allowed here\.$"):
        parse_override("a.b=x\n y: 1")


def test_a_sub_section_override_reaches_every_run_that_sets_that_sub_key() -> None:
    raw = {
        "data": {"files": {"train": "a.tsv", "test": "t.tsv"}},
        "runs": {
            "own": {"data": {"files": {"train": "own.tsv", "test": "own-test.tsv"}}},
            "other": {"data": {"bible": {"src": "k"}}},
            "plain": None,
        },
    }
    new = apply_overrides(raw, ["data.files.train=b.tsv", "data.bible.src=w"])
    assert new["data"] == {"files": {"train": "b.tsv", "test": "t.tsv"}, "bible": {"src": "w"}}
    assert new["runs"] == {
        "own": {"data": {"files": {"train": "b.tsv", "test": "own-test.tsv"}}},  # its other key kept
        "other": {"data": {"bible": {"src": "w"}}},
        "plain": None,
    }
    with_runs = apply_overrides(raw, ["data.files.train=b.tsv", "runs.own.data.files.train=c.tsv"])
    assert with_runs["runs"]["own"]["data"]["files"]["train"] == "c.tsv"  # the run's own --set still wins


def test_overrides_create_sections_reach_every_run_that_sets_the_key_and_run_ones_win() -> None:
    raw = {"model": {"size": 8}, "runs": {"r1": {"model": {"size": 4}}, "r2": {"training": {"steps": 2}}}}
    new = apply_overrides(raw, ["model.size=16", "training.steps=5", "runs.r1.model.size=32", "data.dir=d"])
    assert new == {
        "model": {"size": 16},
        "training": {"steps": 5},
        "data": {"dir": "d"},
        "runs": {"r1": {"model": {"size": 32}}, "r2": {"training": {"steps": 5}}},
    }
    # the run-specific one wins whatever the order, and the input is left as it was
    assert apply_overrides(raw, ["runs.r1.model.size=32", "model.size=16"]) == apply_overrides(
        raw, ["model.size=16", "runs.r1.model.size=32"]
    )
    assert raw["model"]["size"] == 8 and raw["runs"]["r1"]["model"]["size"] == 4
    assert apply_overrides({}, ["model.size=1", "model.size=2"]) == {"model": {"size": 2}}  # the last one wins


def test_a_run_override_must_name_a_run_of_the_config() -> None:
    raw = {"runs": {"rnnsearch-50": {"model": {"size": 4}}, "rnnencdec-50": None}}
    with pytest.raises(NMTError) as error:
        apply_overrides(raw, ["model.size=16", "runs.rnnserch-50.model.size=32"])
    assert error.value.message == (
        "--set runs.rnnserch-50.model.size=32: the config has no run 'rnnserch-50' (did you mean 'rnnsearch-50'?)."
    )
    assert error.value.hint.startswith("Its runs: rnnsearch-50, rnnencdec-50. ")
    with pytest.raises(NMTError) as error:
        apply_overrides({}, ["runs.r.model.size=1"])
    assert error.value.message.endswith("no run 'r'.")  # nothing close: no suggestion
    assert error.value.hint.startswith("Its runs: none. ")
    # a run the file names, even with no settings of its own, takes them
    assert apply_overrides(raw, ["runs.rnnencdec-50.model.size=8"])["runs"]["rnnencdec-50"] == {"model": {"size": 8}}


def test_sets_key_reads_the_key_as_parse_override_does() -> None:
    assert sets_key(["decoding.beam_size=3", " decoding.nbest = 2"], "decoding.nbest")
    with pytest.raises(NMTError, match="each part between dots named"):  # refused, as parse_override refuses it
        sets_key(["decoding..nbest=2"], "decoding.nbest")
    assert sets_key(["decoding.nbest.x=2"], "decoding.nbest")  # a key below it: its value made a section
    assert not sets_key(["decoding.nbest_x=2", "evaluation.nbest=2", "decoding.beam_size=1"], "decoding.nbest")
    assert not sets_key([], "decoding.nbest")


def test_a_run_override_leaves_the_places_that_alias_its_section_unchanged(tmp_path: Path) -> None:
    """YAML anchors load as one object shared by every alias (configs/converged.yaml's Transformer runs share
    `*transformer_training`): --set runs.a.training.max_steps changes run a only, not b nor the top level."""
    path = tmp_path / "anchored.yaml"
    path.write_text("training: &tr {max_steps: 2}\nruns:\n  a: {training: *tr}\n  b: {training: *tr}\n",
                    encoding="utf-8")
    config = load_config(path, ["runs.a.training.max_steps=7"])
    assert [config.for_run(name).training.max_steps for name in "ab"] == [7, 2]
    assert config.training.max_steps == 2
    shared = yaml.safe_load(path.read_text(encoding="utf-8"))
    changed = apply_overrides(shared, ["runs.b.training.max_steps=5", "training.max_steps=3"])
    assert changed["runs"]["b"]["training"] == {"max_steps": 5} and changed["runs"]["a"]["training"] == {"max_steps": 3}
    assert shared["runs"]["a"]["training"] == {"max_steps": 2}  # the document given is left as it was
