#!/usr/bin/env python3
"""Stage 5 check: is ``--nbpe`` large enough for the training text?

Usage: check_bpe_vocab.py --text data/token_list/bpe/train_text.txt --nbpe 30

Stage 5 trains sentencepiece with ``--character_coverage=1.0``, which needs
one vocabulary entry per distinct character plus the word boundary and the
meta pieces ``<unk>``, ``<s>``, ``</s>``; below that, sentencepiece stops with
an internal error.  This check names the smallest valid ``--nbpe`` instead.
(Light on purpose: no ESPnet import, so the stage does not wait for one.)
"""

import argparse
import sys
from typing import Iterable

META_PIECES = 3  # <unk>, <s>, </s>
WORD_BOUNDARY_PIECES = 1  # "▁"


def min_bpe_vocab_size(lines: Iterable[str]) -> int:
    """Smallest sentencepiece vocabulary for ``lines`` at ``character_coverage=1.0``."""
    chars = set()
    for line in lines:
        chars.update(line)
    chars -= set(" \t\r\n")
    return len(chars) + WORD_BOUNDARY_PIECES + META_PIECES


def check_bpe_vocab_size(text_file: str, nbpe: int) -> None:
    """Raise ``ValueError`` (naming the smallest valid value) if ``nbpe`` is too small for ``text_file``."""
    with open(text_file, encoding="utf-8") as f:
        need = min_bpe_vocab_size(f)
    if nbpe < need:
        raise ValueError(
            f"--nbpe {nbpe} is too small for {text_file}: its characters alone need {need} entries "
            f"(distinct characters + word boundary + <unk>, <s>, </s>). Use --nbpe {need} or more, "
            "or --token_type char."
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--text", required=True, help="transcripts, one per line, without utterance ids")
    ap.add_argument("--nbpe", required=True, type=int)
    args = ap.parse_args()
    try:
        check_bpe_vocab_size(args.text, args.nbpe)
    except ValueError as e:
        sys.exit(f"check_bpe_vocab.py: {e}")


if __name__ == "__main__":
    main()
