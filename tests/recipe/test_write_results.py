"""local/write_results.py (stage 13): ESPnet's RESULTS tables from result.json; a run replaces only its section."""

import json

import pytest

from factory import RECIPE_DIR, load_script

pytestmark = pytest.mark.slow  # recipe scripts

SCRIPT = RECIPE_DIR / "local" / "write_results.py"


def write_result(decode_dir, wer_counts, cer_counts, ser=4.0):
    d = decode_dir / "test" / "score"
    d.mkdir(parents=True)
    (s, de, i, n), (cs, cd, ci, cn) = wer_counts, cer_counts
    d.joinpath("result.json").write_text(json.dumps({
        "num_utts": 150, "ser": ser, "wer_sub": s, "wer_del": de, "wer_ins": i, "wer_ref_words": n,
        "cer_sub": cs, "cer_del": cd, "cer_ins": ci, "cer_ref_chars": cn}))


def test_tables_are_espnets_and_a_rerun_replaces_only_its_own_section(tmp_path):
    ws = load_script(SCRIPT)
    readme = tmp_path / "README.md"
    readme.write_text("# recipe\n\ntext above\n")
    for name, counts in (("asr_a", (6, 0, 0, 650)), ("asr_b", (10, 3, 1, 650))):
        exp = tmp_path / name
        write_result(exp / "decode_x", counts, (8, 1, 0, 3000))
        assert ws.main(["--exp", str(exp), "--decode_dir", str(exp / "decode_x"), "--sets", "test",
                        "--readme", str(readme)]) == 0
    text = readme.read_text()
    assert text.startswith("# recipe\n\ntext above\n") and text.count("## asr_a") == text.count("## asr_b") == 1
    assert "|dataset|Snt|Wrd|Corr|Sub|Del|Ins|Err|S.Err|" in text
    assert "|decode_x/test|150|650|99.1|0.9|0.0|0.0|0.9|4.0|" in text  # 6 substitutions of 650 words
    assert "|decode_x/test|150|3000|99.7|0.3|0.0|0.0|0.3|4.0|" in text  # CER: 8 + 1 of 3000 characters
    exp = tmp_path / "asr_a"
    (exp / "decode_x" / "test" / "score" / "result.json").unlink()
    (exp / "decode_x" / "test" / "score").rmdir()
    (exp / "decode_x" / "test").rmdir()
    write_result(exp / "decode_x", (1, 0, 0, 650), (1, 0, 0, 3000), ser=0.7)
    ws.main(["--exp", str(exp), "--decode_dir", str(exp / "decode_x"), "--sets", "test", "--readme", str(readme)])
    text = readme.read_text()
    assert text.count("## asr_a") == 1 and "|decode_x/test|150|650|99.8|0.2|0.0|0.0|0.2|0.7|" in text
    assert "|decode_x/test|150|650|98.0|1.5|0.5|0.2|2.2|4.0|" in text  # asr_b untouched
    assert (exp / "RESULTS.md").read_text().startswith("# RESULTS\n\n## asr_a")
