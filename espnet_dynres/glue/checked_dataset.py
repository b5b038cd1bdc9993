"""Every utterance a ``batch_type: dynres`` run loads is the one its plan was made for."""

from __future__ import annotations

from typing import Dict, Optional

import torch

from espnet_dynres.glue.data_checks import check_audio_file


class CheckedDataset(torch.utils.data.Dataset):
    """Wraps ESPnet's dataset: every loaded utterance must be what the sampler planned with.

    Args:
        dataset, shape_file, fs_hz: ESPnet's ``ESPnetDataset``; the shape file's path; the frontend's rate.
        utt2samples: samples per utterance from the shape file (the sampler's); one channel is expected.

    Raises (from ``__getitem__``):
        ValueError: samples/channels other than the shape file's (rerun collect-stats), or a rate other than ``fs_hz``.
    """

    def __init__(self, dataset, utt2samples: Dict[str, int], shape_file: str, fs_hz: int):
        self.dataset = dataset
        self.utt2samples = utt2samples
        self.shape_file = shape_file
        self.fs_hz = fs_hz
        self._first_uid: Optional[str] = None  # ESPnet checks every file's rate against the first one

    def _audio_path(self, uid: str) -> Optional[str]:
        loader = getattr(self.dataset, "loader_dict", {}).get("speech")
        table = getattr(getattr(loader, "loader", loader), "data", None)
        return table.get(uid) if isinstance(table, dict) else None

    def __getitem__(self, uid: str):
        try:
            uid, data = self.dataset[uid]
        except RuntimeError as e:
            if "Sampling rates are mismatched" not in str(e):
                raise
            path = self._audio_path(uid)
            for key in (uid, self._first_uid):  # this file, else the first one read set ESPnet's rate
                if key is not None and isinstance(self._audio_path(key), str):
                    check_audio_file(key, self._audio_path(key), fs_hz=self.fs_hz, mono=False)  # raises, naming it
            raise ValueError(
                f"utterance {uid} ({path}): {e} (ESPnet compares each file with the first one it read; the model "
                f"expects {self.fs_hz} Hz). Resample the data to one rate (recipe stage 3, --fs) and rerun "
                "collect-stats.") from e
        if self._first_uid is None:
            self._first_uid = uid
        speech = data.get("speech")
        if speech is not None and uid in self.utt2samples:
            samples = int(speech.shape[0])
            channels = int(speech.shape[1]) if speech.ndim > 1 else 1
            want_samples, want_channels = self.utt2samples[uid], 1
            if (samples, channels) != (want_samples, want_channels):
                raise ValueError(
                    f"utterance {uid} ({self._audio_path(uid) or 'speech'}) has {samples} samples x {channels} "
                    f"channel(s), but the shape file {self.shape_file} says {want_samples} x {want_channels}: the "
                    "audio changed after collect-stats (re-cut, re-sampled or re-mixed), so batches were planned "
                    "for other lengths. Rerun collect-stats (asr.sh stage 10 / --collect_stats true) for this "
                    "data, then train again.")
        return uid, data

    def __len__(self) -> int:
        return len(self.dataset)
