"""The corpus sources by their data.source name: one module each, behind `nmt.data.corpus.Source`.

A new source is a module here and one line below; DataConfig.source accepts exactly these names.
"""

from nmt.data.corpus import Source
from nmt.data.sources.bible import Bible
from nmt.data.sources.files import Files
from nmt.data.sources.huggingface import HuggingFace

SOURCES: dict[str, type[Source]] = {"bible": Bible, "files": Files, "huggingface": HuggingFace}
