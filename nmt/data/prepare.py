"""`nmt prepare`: corpus -> split text files + sentencepiece models + stats, in `data.dir`.

The folder is built beside its final place and swapped in at the end (nmt/data/replacing.py: Ctrl-C waits for the swap),
so an interrupted prepare leaves the previous result or the new one, never half of one. Sentencepiece
trains in a child process: its C++ returns to Python only when done, so Ctrl-C would wait for it
(half a minute on 200,000 pairs) where the child can be killed at once.
`prepared.json` records the DataConfig it was built from and the size and modification time of each input
file; a different config, or a changed input file, rebuilds it, naming on stderr the settings or files that
changed (the folder may hold data that runs trained on); a folder that another version of nmt prepared, or
one with files missing or damaged, is rebuilt with a warning saying which.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import sys
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from nmt.config_sections import DataConfig
from nmt.data.corpus import covers, drop_train_overlap, filter_train, input_files
from nmt.data.pairs import MAX_LINE_CHARS, SPLITS, Corpus, Pair
from nmt.data.replacing import build_and_swap_in, one_build_at_a_time
from nmt.data.sources import content_settings, corpus_source, prepared_dir
from nmt.data.subwords import MANIFEST, SUBWORD_KEYS, Tokenizer, read_manifest
from nmt.errors import NMTError
from nmt.fileio import atomic_write_json, atomic_write_text, sha256_file
from nmt.interrupts import starting_children
from nmt.lengths import assign_buckets, make_buckets, word_count
from nmt.typed_yaml import ABSENT, config_changes

FORMAT_VERSION = 2
HISTOGRAM_CUTS = (10, 20, 30, 40, 50, 60)
# How often the wait for the sentencepiece process looks for a Ctrl-C that another thread received.
_POLL_SECONDS = 0.2
# How many changed input files the warning of a rebuild names (a corpus folder may hold thousands).
_SHOWN_INPUTS = 5

def length_histogram(pairs: list[Pair]) -> dict[str, int]:
    """Source-length histogram in words over HISTOGRAM_CUTS (the default evaluation buckets, whatever a config
    sets), every bucket present (in order)."""
    buckets = make_buckets(HISTOGRAM_CUTS)
    indices = assign_buckets([word_count(src) for src, _ in pairs], buckets)
    return {bucket.label: indices.count(i) for i, bucket in enumerate(buckets)}


def _fingerprint(config: DataConfig) -> dict[str, Any]:
    """What the prepared folder depends on: the DataConfig minus locations, plus the size and mtime of
    every input file, each file inside an input folder included."""
    inputs = {}
    for path in corpus_source(config).inputs():
        for file in input_files(path):  # an input that does not exist (yet) has no entry
            stat = file.stat()
            inputs[os.path.abspath(file)] = [stat.st_size, stat.st_mtime_ns]
    # absolute paths, so that a config spelling them from another folder (a run's config.yaml) matches
    return {"format_version": FORMAT_VERSION, "data": content_settings(config), "inputs": inputs}


def _why_stale(directory: Path, config: DataConfig) -> str | None:
    """None where the folder `directory` holds the prepared data of `config`; else why it is prepared again,
    the warning `prepare` prints after "data.dir DIRECTORY " (the first reason that holds, so one warning),
    or "" where it holds no prepared.json: a first build replaces nothing, and says nothing."""
    again = "it is prepared again, replacing it."
    if not (directory / "prepared.json").is_file():
        return ""
    try:
        recorded = json.loads((directory / "prepared.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        return f"has a prepared.json that cannot be read ({error}): {again}"
    if not isinstance(recorded, dict):
        return f"has a prepared.json that is not a JSON object: {again}"
    if recorded.get("format_version") != FORMAT_VERSION:
        version = _shown(recorded.get("format_version", ABSENT))
        return f"was prepared by another version of nmt (format {version} in prepared.json, {FORMAT_VERSION} now): {again}"
    current = json.loads(json.dumps(_fingerprint(config)))  # as prepared.json holds it: tuples are lists
    _keep_removed_inputs(recorded, current, corpus_source(config).inputs())
    if changes := _changed_settings(recorded, current):
        return (
            f"was prepared with other data settings ({', '.join(changes)}): it is prepared again for these, replacing "
            "it. Runs trained on the old data prepare it again for themselves when evaluated; to keep both, give each "
            "setting its own data.dir, or leave data.dir out (each setting then gets its own folder under data/prepared/)."
        )
    if inputs := _changed_inputs(recorded, current):  # the same settings: runs trained on the old files see the new
        shown = ", ".join(inputs[:_SHOWN_INPUTS]) + (f", and {len(inputs) - _SHOWN_INPUTS} more"
                                                      if len(inputs) > _SHOWN_INPUTS else "")
        return (f"was prepared from input files that changed since ({shown}): it is prepared again from them, "
                "replacing it. Runs trained on the old files are evaluated on the new splits from now on.")
    if recorded != current:  # edited by hand
        differing = [key for key in sorted(set(recorded) | set(current)) if recorded.get(key) != current.get(key)]
        return f"has a prepared.json that does not match this config (in {', '.join(differing)}): {again}"
    manifest: dict[str, Any] = {}
    if (directory / MANIFEST).is_file():  # a missing one is named below, with the other missing files
        try:
            manifest = read_manifest(directory)
        except (OSError, ValueError, NMTError) as error:
            detail = error.message.rstrip(".") if isinstance(error, NMTError) else error
            return f"has a tokenizer that cannot be read ({detail}): {again}"
        trained = manifest.get("config", {})
        subwords = {key: getattr(config, key) for key in SUBWORD_KEYS}
        if changes := [f"{key} {_shown(old)} -> {_shown(new)}" for key, old, new in config_changes(trained, subwords, "data.")]:
            return f"has a tokenizer trained with other settings than prepared.json records ({', '.join(changes)}): {again}"
    splits = [f"{split}.{side}" for split in SPLITS for side in ("src", "tgt")]
    needed = [*splits, "stats.json", MANIFEST, *manifest.get("sha256", [])]
    if missing := [name for name in needed if not (directory / name).is_file()]:
        return f"lacks files that nmt prepare wrote there ({', '.join(missing)}): {again}"
    if damaged := [name for name, digest in manifest.get("sha256", {}).items() if sha256_file(directory / name) != digest]:
        return f"has a sentencepiece model whose sha256 differs from {MANIFEST}'s ({', '.join(damaged)}): {again}"
    try:
        stats = json.loads((directory / "stats.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        return f"has a stats.json that cannot be read ({error}): {again}"
    if not isinstance(stats, dict) or not stats.keys() >= STATS_KEYS:
        return f"has a stats.json without the counts nmt prepare writes there: {again}"
    return None


# What stats.json holds from every version of this format (format_stats reads them; later counts are optional)
STATS_KEYS = frozenset({
    "source", "pairs", "dropped_empty", "filtered_long_train", "capped_train", "overlap_dropped", "extra_train_pairs",
    "src_vocab_size", "tgt_vocab_size", "source_words_histogram",
})


def _stats(corpus: Corpus, tokenizer: Tokenizer, config: DataConfig) -> dict[str, Any]:
    return {
        "source": config.source,
        "pairs": {s: len(corpus.splits[s]) for s in SPLITS},
        "dropped_empty": corpus.dropped_empty,
        "filtered_long_train": corpus.filtered_long,
        "capped_train": corpus.capped,
        "overlap_dropped": corpus.overlap_dropped,
        "extra_train_pairs": corpus.extra_train_pairs,
        "bom_stripped": corpus.bom_files,
        "dropped_overlong": corpus.dropped_overlong,
        "carved_splits": corpus.carved,
        "valid_in_test": corpus.valid_in_test,
        "src_vocab_size": tokenizer.src_vocab_size,
        "tgt_vocab_size": tokenizer.tgt_vocab_size,
        "source_words_histogram": {s: length_histogram(corpus.splits[s]) for s in SPLITS},
    }


def _build(directory: Path, config: DataConfig) -> None:
    # the inputs as they were when read: one edited during the build then differs from its record
    before = _fingerprint(config)
    corpus = load_corpus(config)
    for split in SPLITS:
        pairs = corpus.splits[split]
        atomic_write_text(directory / f"{split}.src", "".join(s + "\n" for s, _ in pairs))
        atomic_write_text(directory / f"{split}.tgt", "".join(t + "\n" for _, t in pairs))
    train = corpus.splits["train"]
    tokenizer = _in_child_process(Tokenizer.train, [s for s, _ in train], [t for _, t in train], directory, config)
    atomic_write_json(directory / "stats.json", _stats(corpus, tokenizer, config))
    fingerprint = _fingerprint(config)  # with the inputs the build fetched (the Bible's download) ...
    fingerprint["inputs"] |= before["inputs"]  # ... and the others' state before they were read
    # Written last: its presence says the folder is complete.
    atomic_write_json(directory / "prepared.json", fingerprint)


def _in_child_process(function: Callable[..., Tokenizer], *args: Any) -> Tokenizer:
    """`function(*args)` (sentencepiece's training) run in a child process, which is killed at once if this
    one is interrupted; its result, or its exception, is passed back."""
    # spawn, not fork: the caller may be a training process with torch's threads running
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    child = context.Process(target=_run_in_child, args=(sender, function, args), daemon=True)
    outcome = None
    try:
        with starting_children():  # started whole, deaf to the group's Ctrl-C and SIGTERM: killed below
            child.start()
            sender.close()  # the child's copy stays open: its result or its death ends the wait
        while not receiver.poll(_POLL_SECONDS):
            pass
        with contextlib.suppress(EOFError):  # the child died without sending
            outcome = receiver.recv()
    finally:
        if child.is_alive():
            child.kill()
        if child.pid is not None:  # started
            child.join()
        receiver.close()
    if outcome is None:
        raise NMTError(
            f"the process training sentencepiece ended without a result (exit code {child.exitcode}).",
            "Its error, if it printed one, is above; a process killed for want of memory ends so: "
            "lower data.max_train_pairs or data.vocab_size.",
        )
    if isinstance(outcome, Exception):
        raise outcome
    return outcome


def _run_in_child(sender: Connection, function: Callable[..., Any], args: tuple[Any, ...]) -> None:
    """The child's side of `_in_child_process`: it sends the result, or the exception raised instead."""
    try:
        outcome = function(*args)
    except Exception as error:
        outcome = error
    sender.send(outcome)


def _check_replaceable(directory: Path, config: DataConfig) -> None:
    """Refuse a data.dir whose replacement would delete what the user keeps there: a folder that
    `nmt prepare` did not write, or one that holds the corpus (or lies in a dataset folder it reads)."""
    if directory.exists() and not directory.is_dir():
        raise NMTError(f"data.dir {directory} exists and is not a folder.", "Point data.dir at a folder.")
    if directory.is_dir() and any(directory.iterdir()) and not (directory / "prepared.json").is_file():
        raise NMTError(
            f"data.dir {directory} holds files that `nmt prepare` did not write (it has no prepared.json); "
            "preparing replaces the whole folder, so nothing was done.",
            "Point data.dir at a new or empty folder, or at one that nmt prepare wrote.",
        )
    here, source = Path(os.path.abspath(directory)), corpus_source(config)
    for path in source.kept_apart():
        there = Path(os.path.abspath(path))
        inside_input = source.reads_folders and there.is_dir() and there in here.parents
        if here == there or here in there.parents or inside_input:
            raise NMTError(
                f"data.dir {directory} and the input {path} lie one inside the other: preparing replaces "
                "data.dir whole, which would delete the input (or make the prepared data part of the corpus).",
                "Point data.dir at a folder apart from the corpus files and data.cache_dir; nothing was done.",
            )


def _changed_settings(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """The data settings (content_settings) of the fingerprint `current` that differ from those of the prepared.json
    content `recorded`, each as 'data.KEY OLD -> NEW'; [] where it records none."""
    if not isinstance(recorded.get("data"), dict):
        return []
    # source keys sit under data.SOURCE, as in a config
    changes = config_changes(recorded["data"], current["data"], "data.")
    return [f"{key} {_shown(old)} -> {_shown(new)}" for key, old, new in changes]


def _shown(value: Any) -> str:
    """A setting's value as JSON (strings quoted), or "(absent)"."""
    return "(absent)" if value is ABSENT else json.dumps(value, ensure_ascii=False)


def _keep_removed_inputs(recorded: dict[str, Any], current: dict[str, Any], inputs: list[Path]) -> None:
    """Count an input file that is gone since the folder was built (the raw corpus deleted once prepared, or
    not copied to this machine) as unchanged in the fingerprint `current`: the prepared data does not need
    it. Only a file that is there and changed, a new one, or one gone from a folder or glob of `inputs` that
    still gives others (read now, they would give other data) makes the folder stale."""
    if isinstance(recorded.get("inputs"), dict):
        giving = [path for path in inputs if input_files(path)]
        for file, stamp in recorded["inputs"].items():
            if file not in current["inputs"] and not any(covers(path, file) for path in giving):
                current["inputs"][file] = stamp


def _changed_inputs(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """The input files whose size or modification time in the fingerprint `current` differs from what the
    prepared.json content `recorded` holds of them (it keeps no more: not their content), each as 'FILE OLD -> NEW
    bytes', 'FILE modified (same size)', 'FILE (new)' or 'FILE (removed)'; [] where it records none."""
    if not isinstance(recorded.get("inputs"), dict):
        return []
    recorded, current = recorded["inputs"], current["inputs"]
    changes = []
    for file in sorted(set(recorded) | set(current)):
        old, new = recorded.get(file), current.get(file)
        if old is None:
            changes.append(f"{file} (new)")
        elif new is None:
            changes.append(f"{file} (removed)")
        elif old != new:
            changes.append(f"{file} {old[0]} -> {new[0]} bytes" if old[0] != new[0] else f"{file} modified (same size)")
    return changes


def prepare(config: DataConfig) -> dict[str, Any]:
    """Build `data.dir` unless it already holds the result of this config; return its stats.

    Sentencepiece trains in a process started by multiprocessing's spawn, so a script calling this
    needs the usual `if __name__ == "__main__":` guard."""
    return _prepare(config)[0]


def prepare_summary(config: DataConfig) -> str:
    """`prepare`, then what `nmt prepare` prints: `format_stats` of the folder, saying whether this process built it
    or found it prepared (by an earlier run, or by another process it waited for)."""
    stats, built = _prepare(config)
    return format_stats(stats, config, built=built)


def _prepare(config: DataConfig) -> tuple[dict[str, Any], bool]:
    """-> (`prepare`'s stats, whether this call built the folder)."""
    directory = Path(prepared_dir(config))
    if directory.is_symlink():  # a link to a folder elsewhere (another disk): rebuilt there, the link kept
        directory = Path(os.path.realpath(directory))
    if _why_stale(directory, config) is None:  # current: no lock, no wait behind another folder's build
        return _read_stats(directory), False
    made = [folder for folder in directory.parents if not folder.exists()]  # innermost first
    directory.parent.mkdir(parents=True, exist_ok=True)
    reason = None
    try:
        with one_build_at_a_time(directory):
            reason = _why_stale(directory, config)  # again: another prepare may have built it meanwhile
            if reason is not None:
                _check_replaceable(directory, config)
                if reason:
                    # a legitimate rebuild, but it deletes data other runs may have trained on; printed as
                    # nmt/decoding/translator.py's warn prints (that module needs torch, which preparing does not)
                    print(f"warning: data.dir {directory} {reason}", file=sys.stderr)
                build_and_swap_in(directory, lambda folder: _build(folder, config))
    except BaseException:  # a failed prepare leaves no empty folders (data/prepared/) behind
        if reason:  # the warning above said the folder would be replaced: it was not
            print(f"data.dir {directory} was left as it was: the new build did not finish.", file=sys.stderr)
        for folder in made:
            with contextlib.suppress(OSError):  # not empty: another prepare writes there
                folder.rmdir()
        raise
    return _read_stats(directory), reason is not None


def _read_stats(directory: Path) -> dict[str, Any]:
    return json.loads((directory / "stats.json").read_text(encoding="utf-8"))


def is_prepared(config: DataConfig) -> bool:
    """Whether `data.dir` holds the prepared data of `config`, current: `prepare` would rebuild nothing."""
    return _why_stale(Path(prepared_dir(config)), config) is None


def _by_split(counts: dict[str, int]) -> str:
    return ", ".join(f"{split} {n}" for split, n in counts.items())


def format_stats(stats: dict[str, Any], config: DataConfig | None = None, built: bool = True) -> str:
    """Pair counts per split and the source-length histogram, as a plain-text table; with `config`, first
    where the data was prepared and from what (which splits were carved from train), and whether it was
    `built` now or found prepared already."""
    lines: list[str] = []
    if config is not None:
        where, source = prepared_dir(config), corpus_source(config).describe()
        lines.append(f"prepared {where} from {source}" if built else
                     f"{where} is already prepared from {source} (current: nothing was rebuilt)")
    lines += [
        f"source: {stats['source']}   vocab: src {stats['src_vocab_size']}, tgt {stats['tgt_vocab_size']}",
        f"dropped empty pairs: {_by_split(stats['dropped_empty'])}; "
        f"training pairs filtered as too long: {stats['filtered_long_train']}, "
        f"left out by max_train_pairs: {stats['capped_train']}"
        + (f", extra translation pairs (data.bible.extra_translations): {stats['extra_train_pairs']}"
           if stats["extra_train_pairs"] else "")
        + f"; valid/test pairs dropped as their source is in training: {_by_split(stats['overlap_dropped'])}",
    ]
    if stats.get("valid_in_test"):  # absent from stats.json written before it was counted
        lines.append(f"valid pairs dropped as their source is in the test split: {stats['valid_in_test']}")
    overlong = stats.get("dropped_overlong") or {}  # absent from stats.json written before it was counted
    if any(overlong.values()):
        lines.append(f"pairs dropped with a side over {MAX_LINE_CHARS:,} characters: {_by_split(overlong)}")
    given = [split for split, count in stats["overlap_dropped"].items()
             if count and "carved_splits" in stats and split not in stats["carved_splits"]]
    if given:  # a test set of one's own (WMT's newstest) scores comparably with others' only whole
        lines.append(f"note: the {' and '.join(given)} split{'s' if len(given) > 1 else ''} given as files lost "
                     "pairs whose source is also in training (data.drop_train_overlap: true): scores on "
                     f"{'them' if len(given) > 1 else 'it'} are not comparable with others' on the whole file; "
                     "data.drop_train_overlap: false keeps given splits whole.")
    boms = stats.get("bom_stripped") or []
    if boms:
        lines.append(f"byte-order marks stripped (opening a file, or a line where files were joined) in {len(boms)} "
                     f"file(s): {', '.join(boms)}")
    lines.append("")
    histogram = stats["source_words_histogram"]
    width = max(9, *(len(str(n)) + 2 for n in stats["pairs"].values()))
    lines.append("source words".ljust(14) + "".join(s.rjust(width) for s in SPLITS))
    for label in histogram["train"]:
        lines.append(label.ljust(14) + "".join(str(histogram[s][label]).rjust(width) for s in SPLITS))
    lines.append("all".ljust(14) + "".join(str(stats["pairs"][s]).rjust(width) for s in SPLITS))
    return "\n".join(lines)


def load_corpus(config: DataConfig) -> Corpus:
    """Read the configured source, clean and split it, filter training pairs, drop valid/test pairs
    seen in training (data.drop_train_overlap); NMTError if any split is empty."""
    corpus = corpus_source(config).read()
    filter_train(corpus, config)
    if config.drop_train_overlap:
        drop_train_overlap(corpus)
    for split in SPLITS:
        if not corpus.splits[split]:
            raise NMTError(
                f"the {split} split is empty after reading and filtering data.source '{config.source}' "
                f"({corpus.dropped_empty[split]} empty pairs dropped, "
                + (f"{corpus.filtered_long} too long, " if split == "train" else "")  # the length filter is train's only
                + f"{corpus.overlap_dropped.get(split, 0)} also in training"
                + (f", {corpus.valid_in_test} also in test" if split == "valid" and corpus.valid_in_test else "") + ").",
                "Check the input files, data.max_train_words, data.drop_train_overlap and "
                "data.valid_fraction / data.test_fraction.",
            )
    return corpus
