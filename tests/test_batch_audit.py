import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from espnet_dynres.batch_audit import (
    ESPNET_BATCH_TYPES,
    ShapeTable,
    audit_batches,
    build_batches,
    composition_change,
    read_shape_table,
)
from espnet_dynres.core.batch_planner import BatchKind, BatchPlan
from espnet_dynres.core.frame_rate_policy import FrameRatePolicy
from factory import write_shape_files

RULE, PADDED, STANDARD = BatchKind.RULE, BatchKind.PADDED, BatchKind.STANDARD

HOP = 160
FS = 16000
SLOW = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def table(num_samples, tokens=None):
    keys = [f"utt{i:06d}" for i in range(len(num_samples))]
    tok = None if tokens is None else np.asarray(tokens, dtype=np.int64)
    return ShapeTable(keys, np.asarray(num_samples, dtype=np.int64), tok)


def audit_espnet(tmp_path, batch_type, num_samples, **kw):
    shape_files, _ = write_shape_files(tmp_path, num_samples)
    built = build_batches(batch_type, shape_files[0], **kw)
    return audit_batches(read_shape_table(shape_files[0]), built.epoch1, built.epoch2,
                         hop_length_samples=HOP, fs_hz=FS, batch_type=batch_type)


# ------------------------------------------------------------------ padding
def test_padding_by_hand():
    # standard frames 1 + L // 160: 10 and 4 -> padded to 10: 6 of 20 frames are padding.
    t = table([9 * HOP, 3 * HOP + 5, 7 * HOP])
    audit = audit_batches(t, [("utt000000", "utt000001"), ("utt000002",)], hop_length_samples=HOP, fs_hz=FS)
    assert audit.padded_frames == 6
    assert audit.total_frames == 20 + 8
    assert audit.padding_fraction == pytest.approx(6 / 28)
    assert audit.batch_padded_frames.tolist() == [6, 0]


def test_planned_batches_have_no_padding_and_padded_batches_do():
    t = table([9 * HOP, 3 * HOP, 7 * HOP])
    batches = [("utt000000", "utt000001"), ("utt000002",)]
    planned = audit_batches(t, batches, hop_length_samples=HOP, fs_hz=FS,
                            plans=[BatchPlan((7, 7), RULE), BatchPlan((8,), RULE)])
    assert planned.padded_frames == 0 and planned.total_frames == 2 * 7 + 8
    assert planned.num_padded_batches == 0
    # a padded batch is padded to its longest planned member
    lowest = audit_batches(t, batches, hop_length_samples=HOP, fs_hz=FS,
                           plans=[BatchPlan((6, 3), PADDED), BatchPlan((8,), RULE)])
    assert lowest.total_frames == 2 * 6 + 8 and lowest.padded_frames == 6 - 3 and lowest.num_padded_batches == 1
    assert lowest.frame_rate_hz.min == pytest.approx(60.0)  # 6 of 10 standard frames


def test_plans_must_match_the_batches():
    t = table([9 * HOP, 3 * HOP, 7 * HOP])
    batches = [("utt000000", "utt000001"), ("utt000002",)]
    for plans in ([BatchPlan((7,), RULE), BatchPlan((8,), RULE)], [BatchPlan((7, 7), RULE)],
                  [BatchPlan((7, 7), RULE), BatchPlan((8,), RULE), BatchPlan((8,), RULE)],
                  [BatchPlan((0, 3), PADDED), BatchPlan((8,), RULE)]):
        with pytest.raises(ValueError, match="plans must hold|planned frame count must be >= 1"):
            audit_batches(t, batches, hop_length_samples=HOP, fs_hz=FS, plans=plans)


def test_frame_rate_per_utterance_by_hand():
    # standard frames 10, 4, 8; planned T = 7 (first batch) and 8: 70, 175 and 100 Hz
    t = table([9 * HOP, 3 * HOP, 7 * HOP])
    batches = [("utt000000", "utt000001"), ("utt000002",)]
    planned = audit_batches(t, batches, hop_length_samples=HOP, fs_hz=FS,
                            plans=[BatchPlan((7, 7), RULE), BatchPlan((8,), RULE)])
    assert planned.frame_rate_hz.min == pytest.approx(70.0) and planned.frame_rate_hz.max == pytest.approx(175.0)
    assert planned.frame_rate_hz.median == pytest.approx(100.0)
    assert planned.off_standard_rate_fraction == pytest.approx(2 / 3)
    # evaluation batches (STANDARD plans) run at the standard rate, padded, as ESPnet's samplers do
    for plans in ([BatchPlan((10, 4), STANDARD), BatchPlan((8,), STANDARD)], None):
        padded = audit_batches(t, batches, hop_length_samples=HOP, fs_hz=FS, plans=plans)
        assert padded.frame_rate_hz.min == padded.frame_rate_hz.max == pytest.approx(100.0)
        assert padded.off_standard_rate_fraction == 0.0 and padded.padded_frames == 10 - 4


@SLOW
@given(n=st.integers(1, 200), length=st.integers(1, 500000), batch_size=st.integers(1, 50))
def test_equal_lengths_give_no_padding(tmp_path, n, length, batch_size):
    for batch_type in ("unsorted", "sorted", "numel", "length"):
        audit = audit_espnet(tmp_path, batch_type, [length] * n, batch_size=batch_size,
                             batch_bins=batch_size * length)
        assert audit.padding_fraction == 0.0
        assert audit.num_utterances_in_batches == n


@SLOW
@given(lengths=st.lists(st.integers(1, 800000), min_size=1, max_size=200), batch_size=st.integers(1, 40))
def test_sorting_never_pads_more_than_file_order(tmp_path, lengths, batch_size):
    unsorted = audit_espnet(tmp_path, "unsorted", lengths, batch_size=batch_size)
    sorted_ = audit_espnet(tmp_path, "sorted", lengths, batch_size=batch_size)
    assert unsorted.num_batches == sorted_.num_batches
    assert unsorted.padding_fraction >= sorted_.padding_fraction
    assert 0.0 <= sorted_.padding_fraction < 1.0


# ------------------------------------------------------------------- tokens
def test_token_statistics_by_hand():
    t = table([HOP] * 6, tokens=[1, 2, 3, 4, 5, 6])
    keys = t.keys
    audit = audit_batches(t, [keys[0:2], keys[2:5], keys[5:6]], hop_length_samples=HOP, fs_hz=FS)
    # per-batch tokens 3, 12, 6; percentiles interpolate linearly: 5 % = 3 + 0.1 * (6 - 3).
    assert audit.batch_tokens.tolist() == [3, 12, 6]
    d = audit.tokens
    assert (d.min, d.median, d.max, d.mean) == (3, 6, 12, 7)
    assert d.p5 == pytest.approx(3.3) and d.p95 == pytest.approx(12 - 0.1 * 6)
    assert d.cv == pytest.approx(math.sqrt((16 + 25 + 1) / 3) / 7)
    assert audit.batch_size.median == 2 and audit.batch_size.max == 3


def test_audio_per_batch_by_hand():
    # 1 s + 2 s, 0.5 s: the audio per step whatever the frame rate or padding.
    t = table([FS, 2 * FS, FS // 2])
    audit = audit_batches(t, [t.keys[0:2], t.keys[2:3]], hop_length_samples=HOP, fs_hz=FS,
                          plans=[BatchPlan((70, 70), RULE), BatchPlan((40,), RULE)])
    assert audit.batch_audio_sec.tolist() == [3.0, 0.5]
    assert (audit.audio_sec.min, audit.audio_sec.max, audit.audio_sec.mean) == (0.5, 3.0, 1.75)
    assert "batch_audio_sec" not in audit.summary() and audit.summary()["audio_sec"]["mean"] == 1.75


def test_no_text_shape_no_token_statistics():
    t = table([HOP, 2 * HOP])
    audit = audit_batches(t, [tuple(t.keys)], hop_length_samples=HOP, fs_hz=FS)
    assert audit.tokens is None and audit.batch_tokens is None
    assert audit.summary()["tokens"] is None


# ------------------------------------------------------ composition change
def test_composition_change_by_hand():
    a = [("a", "b", "c", "d")]
    assert composition_change(a, [("c", "a"), ("d", "b")]) == pytest.approx(1 - 2 / 6)
    assert composition_change(a, [("d", "c", "b", "a")]) == 0.0
    assert composition_change(a, [("a",), ("b",), ("c",), ("d",)]) == 1.0
    assert composition_change([("a",), ("b",)], a) is None


@settings(max_examples=60, deadline=None)
@given(n=st.integers(2, 40), data=st.data())
def test_composition_change_equals_pair_count(n, data):
    keys = [f"u{i}" for i in range(n)]

    def partition():
        labels = data.draw(st.lists(st.integers(0, 6), min_size=n, max_size=n))
        groups = {}
        for k, g in zip(keys, labels):
            groups.setdefault(g, []).append(k)
        order = data.draw(st.permutations(list(groups.values())))
        return [tuple(g) for g in order]

    a, b = partition(), partition()
    pairs = lambda batches: {frozenset(p) for bt in batches for p in itertools.combinations(bt, 2)}  # noqa: E731
    got = composition_change(a, b)
    if not pairs(a):
        assert got is None
    else:
        assert got == pytest.approx(len(pairs(a) - pairs(b)) / len(pairs(a)))
        assert composition_change(a, list(reversed(a))) == 0.0


def test_espnet_samplers_keep_their_batches(tmp_path):
    lengths = [int(16000 * (0.3 + 0.37 * (i % 29))) for i in range(300)]
    shape_files, _ = write_shape_files(tmp_path, lengths)
    t = read_shape_table(*shape_files)
    for batch_type in ESPNET_BATCH_TYPES:
        built = build_batches(batch_type, *shape_files, batch_size=8, batch_bins=1600000)
        audit = audit_batches(t, built.epoch1, built.epoch2, hop_length_samples=HOP, fs_hz=FS,
                              batch_type=batch_type)
        assert audit.composition_change == 0.0, batch_type
        assert audit.num_utterances_in_batches == len(lengths), batch_type
        assert audit.tokens is not None


def test_dynres_has_no_padding_and_redraws(tmp_path):
    lengths = [int(16000 * 0.3 * 1.02**i) for i in range(300)]  # 0.3 s to 110 s
    shape_files, _ = write_shape_files(tmp_path, lengths)
    built = build_batches("dynres", shape_files[0], batch_bins=6000, policy=FrameRatePolicy(fs=16000, hop_length=160), seed=3)
    audit = audit_batches(read_shape_table(shape_files[0]), built.epoch1, built.epoch2,
                          hop_length_samples=HOP, fs_hz=FS, plans=built.plans)
    assert audit.num_padded_batches == 0 and audit.padding_fraction == 0.0
    assert [len(p.frames) for p in built.plans] == [len(b) for b in built.epoch1]
    assert sorted(k for b in built.epoch1 for k in b) == sorted(read_shape_table(shape_files[0]).keys)
    assert ((audit.batch_frames <= 6000) | (audit.batch_sizes == 1)).all()
    assert audit.composition_change > 0.0


# ------------------------------------------------------------------ errors
def test_unknown_utterance_is_named():
    t = table([HOP])
    with pytest.raises(ValueError, match="ghost"):
        audit_batches(t, [("utt000000", "ghost")], hop_length_samples=HOP, fs_hz=FS)


def test_malformed_shape_file_names_the_line(tmp_path):
    path = tmp_path / "speech_shape"
    path.write_text("a 100\nb\n")
    with pytest.raises(ValueError, match="speech_shape:2"):
        read_shape_table(path)


def test_text_shape_with_other_keys_is_refused(tmp_path):
    shape_files, _ = write_shape_files(tmp_path, [16000, 32000])
    with open(shape_files[1], "a") as f:
        f.write("extra_utt 3,13\n")
    with pytest.raises(ValueError, match="extra_utt"):
        read_shape_table(*shape_files)


def test_unknown_batch_type_is_refused(tmp_path):
    shape_files, _ = write_shape_files(tmp_path, [16000])
    with pytest.raises(ValueError, match="choose from"):
        build_batches("bucket", shape_files[0])
