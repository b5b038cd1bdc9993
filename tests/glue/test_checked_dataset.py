"""A loaded utterance must be what the plan was made from: a stale shape file (audio re-cut after
collect-stats), a stereo file under a mono shape, or a file at another sampling rate is named, with
the fix, at the first batch that holds it (train and valid), not deep in the frontend or ESPnet."""

import numpy as np
import pytest
from espnet2.train.collate_fn import CommonCollateFn
from espnet2.train.dataset import ESPnetDataset

from espnet_dynres.core.frame_rate_policy import FrameRatePolicy
from espnet_dynres.glue.checked_dataset import CheckedDataset
from espnet_dynres.iterators.dynres_iter_factory import DynResIterFactory
from espnet_dynres.samplers.dynres_batch_sampler import DynResBatchSampler
from factory import write_data_dir, write_wav


def factory_for(data_dir, train=True):
    sampler = DynResBatchSampler(batch_bins=4000, shape_files=[str(data_dir / "speech_shape")],
                                 policy=FrameRatePolicy(fs=16000, hop_length=160), shuffle=train)
    dataset = CheckedDataset(ESPnetDataset([(str(data_dir / "wav.scp"), "speech", "sound")]), sampler.utt2samples,
                             sampler.shape_files[0], sampler.policy.fs)  # as the task builds it
    return DynResIterFactory(dataset=dataset, sampler=sampler, train=train,
                             collate_fn=CommonCollateFn(float_pad_value=0.0, int_pad_value=-1))


def run_epoch(factory):
    return sum(len(uids) for uids, _ in factory.build_iter(1))


def test_matching_data_trains_and_validates(tmp_path):
    data = write_data_dir(tmp_path / "d", 6)
    assert run_epoch(factory_for(data)) == 6 and run_epoch(factory_for(data, train=False)) == 6


@pytest.mark.parametrize("train", [True, False])
def test_a_recut_file_names_the_stale_shape_file_and_collect_stats(tmp_path, train):
    data = write_data_dir(tmp_path / "d", 6)
    last = (data / "wav.scp").read_text().splitlines()[-1].split()
    wav = np.random.default_rng(0).uniform(-0.1, 0.1, size=9060).astype(np.float32)  # re-cut: shorter
    write_wav(tmp_path / "d" / "wav" / f"{last[0]}.wav", wav)
    with pytest.raises(ValueError, match=rf"utterance {last[0]} .* has 9060 samples x 1 channel.*speech_shape says "
                                         r"\d+ x 1.*Rerun collect-stats"):
        run_epoch(factory_for(data, train))


def test_a_stereo_file_under_a_mono_shape_is_named(tmp_path):
    data = write_data_dir(tmp_path / "d", 4)
    first = (data / "wav.scp").read_text().splitlines()[0].split()
    n = int((data / "speech_shape").read_text().splitlines()[0].split()[1])
    write_wav(tmp_path / "d" / "wav" / f"{first[0]}.wav", np.zeros((n, 2), dtype=np.float32))
    with pytest.raises(ValueError, match=rf"utterance {first[0]} .* {n} samples x 2 channel.*{n} x 1"):
        run_epoch(factory_for(data))


@pytest.mark.parametrize("which", [0, -1])  # read first (sets ESPnet's rate) or after the others
def test_one_file_at_another_sampling_rate_is_named_with_its_rate_and_the_fix(tmp_path, which):
    data = write_data_dir(tmp_path / "d", 6)
    order = [u for b in [b.keys for b in factory_for(data, train=False).sampler.planned_batches(1)] for u in b]
    lines = {l.split()[0]: l for l in (data / "wav.scp").read_text().splitlines()}
    last = lines[order[which]].split()
    n = int(dict(l.split() for l in (data / "speech_shape").read_text().splitlines())[last[0]])
    write_wav(tmp_path / "d" / "wav" / f"{last[0]}.wav", np.zeros(n, dtype=np.float32), fs_hz=8000)
    with pytest.raises(ValueError, match=rf"utterance {last[0]} .* sampled at 8000 Hz.*expects 16000 Hz.*Resample"):
        run_epoch(factory_for(data, train=False))
