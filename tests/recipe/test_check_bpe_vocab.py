"""Stage 5 refuses an --nbpe below what sentencepiece needs, naming the smallest valid value."""

from __future__ import annotations

import re
import subprocess

import pytest
import sentencepiece as spm

from factory import RECIPE_DIR, load_script

pytestmark = pytest.mark.slow  # recipe scripts

SCRIPT = RECIPE_DIR / "local" / "check_bpe_vocab.py"
LINES = ["one two three", "four five six seven", "eight nine zero"]


@pytest.fixture(scope="module")
def check():
    return load_script(SCRIPT)


def test_the_bound_is_sentencepieces_own(tmp_path, check):
    text = tmp_path / "train_text.txt"
    text.write_text("".join(line + "\n" for line in LINES))
    need = check.min_bpe_vocab_size(LINES)
    with pytest.raises(ValueError, match=rf"--nbpe {need - 1} is too small .* Use --nbpe {need} or more"):
        check.check_bpe_vocab_size(str(text), need - 1)
    check.check_bpe_vocab_size(str(text), need)
    # Stage 5's sentencepiece settings train at `need` and refuse `need - 1`.
    common = dict(input=str(text), model_type="unigram", character_coverage=1.0, minloglevel=3)
    spm.SentencePieceTrainer.train(vocab_size=need, model_prefix=str(tmp_path / "ok"), **common)
    with pytest.raises(RuntimeError, match="Vocabulary size is smaller than required_chars"):
        spm.SentencePieceTrainer.train(vocab_size=need - 1, model_prefix=str(tmp_path / "bad"), **common)


def test_run_sh_stage_5_stops_before_sentencepiece(tmp_path):
    train = tmp_path / "dump" / "raw" / "train"
    train.mkdir(parents=True)
    (train / "text").write_text("".join(f"u{i} {line}\n" for i, line in enumerate(LINES)))
    cmd = [
        "bash", str(RECIPE_DIR / "run.sh"), "--stage", "5", "--stop_stage", "5", "--token_type", "bpe", "--nbpe", "5",
        "--datadir", str(tmp_path / "data"), "--dumpdir", str(tmp_path / "dump"), "--expdir", str(tmp_path / "exp"),
    ]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode != 0
    assert re.search(r"check_bpe_vocab.py: --nbpe 5 is too small .* Use --nbpe 19 or more", out.stderr), out.stderr[-2000:]
    assert not (tmp_path / "data" / "token_list" / "bpe" / "spm_train.log").exists()
