"""`nmt prepare CONFIG`: the corpus split, sentencepiece models and statistics in `data.dir`
(nmt/data/prepare.py)."""

from __future__ import annotations

import argparse

from nmt.commands.arguments import add_config


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`nmt prepare CONFIG`."""
    add_config(parser)


def run(args: argparse.Namespace) -> None:
    from nmt.data.prepare import prepare_summary  # the library: only now
    from nmt.data.sources import load_checked_config

    config = load_checked_config(args.config, args.overrides)
    print(prepare_summary(config.data))
