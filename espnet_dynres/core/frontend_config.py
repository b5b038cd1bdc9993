"""``frontend: dynres``'s settings as a value (options, checked, and frame-rate policy) built from ``frontend_conf``
without the frontend module, for the sampler, checks, audit, converter and frontend.  Every default is here once."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field, fields
from typing import Mapping, Optional, Sequence, Union

from espnet_dynres.core.frame_rate_policy import FrameRatePolicy, parse_fs

METHODS = ("hop", "resample")
FILTERBANKS = ("original", "resampled")
# DefaultFrontend options a ``frontend: default`` config may carry: the one value dynres computes with, and why.
DEFAULT_FRONTEND_FIXED = {
    "center": (True, "the dynres frontend frames with centred windows (1 + T_samples // hop_length frames, as "
                     "DefaultFrontend's default), which its frame-count rule depends on"),
    "normalized": (False, "the dynres frontend computes the unnormalised STFT power, as DefaultFrontend's default"),
    "onesided": (True, "the dynres frontend's mel filterbank takes the one-sided spectrum (n_fft // 2 + 1 bins)"),
    "apply_stft": (True, "the dynres frontend computes its features from raw audio; for extracted features use "
                         "frontend: null with input_size"),
}
MULTICHANNEL_SWITCHES = ("use_wpe", "use_beamformer")  # frontend_conf's multi-channel front-end: must be off


@dataclass(frozen=True)
class FrontendConfig:
    """The dynres frontend's options (``frontend_conf`` keys; docs/options.md, docs/frontend.md).

    DefaultFrontend's ``fs``, ``n_fft``, ``win_length``, ``hop_length``, ``window``, ``n_mels``, ``fmin``, ``fmax``,
    ``htk`` mean the same, with the same defaults (hop 128 = 125 Hz at 16 kHz); the rate keys configure :attr:`policy`;
    ``method``, ``resample_filterbank``, ``resample_grid_hz`` (``None``: ``fs / 40``) how training rates are computed;
    ``center``, ``normalized``, ``onesided``, ``apply_stft``, ``frontend_conf``: :data:`DEFAULT_FRONTEND_FIXED`.

    Raises:
        ValueError: an unsupported DefaultFrontend option, odd ``n_fft``, ``win_length`` outside ``1..n_fft``, unknown
            ``method``/``resample_filterbank``, ``resample_grid_hz <= 0``, an invalid clamp (:class:`FrameRatePolicy`).
    """
    fs: Union[int, str] = 16000
    n_fft: int = 512
    win_length: Optional[int] = None
    hop_length: int = 128
    window: Optional[str] = "hann"
    n_mels: int = 80
    fmin: Optional[int] = None
    fmax: Optional[int] = None
    htk: bool = False
    min_frame_rate_hz: Optional[float] = None
    max_frame_rate_hz: Optional[float] = None
    fallback_frame_rate_hz: Optional[float] = None
    curriculum_epochs: int = 0
    target_frame_rate_hz: Optional[float] = None
    eval_frame_rate_hz: Optional[float] = None
    target_frame_rate_range_hz: Optional[Union[Sequence[float], float]] = None  # a number is refused with the fix
    method: str = "hop"
    resample_filterbank: str = "original"
    resample_grid_hz: Optional[int] = None
    center: bool = True
    normalized: bool = False
    onesided: bool = True
    frontend_conf: Optional[dict] = None
    apply_stft: bool = True

    def __post_init__(self):
        for key, (fixed, why) in DEFAULT_FRONTEND_FIXED.items():
            if getattr(self, key) is not fixed:
                raise ValueError(
                    f"frontend_conf {key}: {getattr(self, key)} is not supported by frontend: dynres: {why}. "
                    f"Remove {key} from frontend_conf (or set it to {str(fixed).lower()}).")
        on = [k for k in MULTICHANNEL_SWITCHES if (self.frontend_conf or {}).get(k)]
        if on:
            raise ValueError(
                f"frontend_conf frontend_conf: {', '.join(f'{k}: true' for k in on)} (DefaultFrontend's WPE / "
                "beamformer for multi-channel input) is not supported by frontend: dynres, which takes mono audio "
                "and plans one frame rate per utterance. Remove frontend_conf from frontend_conf, or enhance / "
                "down-mix the audio when preparing the data.")
        fs = parse_fs(self.fs)
        object.__setattr__(self, "fs", fs)
        win_length = self.n_fft if self.win_length is None else self.win_length
        object.__setattr__(self, "win_length", win_length)
        if self.n_fft % 2 != 0:
            raise ValueError(f"n_fft must be even (frame centres as DefaultFrontend), got {self.n_fft}")
        if not 0 < win_length <= self.n_fft:
            raise ValueError(f"win_length must be in 1..n_fft={self.n_fft}, got {win_length}")
        if self.method not in METHODS:
            raise ValueError(f"frontend_conf method must be one of {METHODS}, got {self.method!r}")
        if self.resample_filterbank not in FILTERBANKS:
            raise ValueError(f"frontend_conf resample_filterbank must be one of {FILTERBANKS}, "
                             f"got {self.resample_filterbank!r}")
        grid = fs // 40 if self.resample_grid_hz is None else self.resample_grid_hz
        if grid <= 0:
            raise ValueError(f"resample_grid_hz must be a positive number of Hz, got {grid}")
        object.__setattr__(self, "resample_grid_hz", grid)
        rng = self.target_frame_rate_range_hz
        rates = {k: None if getattr(self, k) is None else float(getattr(self, k)) for k in
                 ("min_frame_rate_hz", "max_frame_rate_hz", "fallback_frame_rate_hz", "target_frame_rate_hz",
                  "eval_frame_rate_hz")}
        object.__setattr__(self, "policy", FrameRatePolicy(
            fs=fs, hop_length=self.hop_length, curriculum_epochs=self.curriculum_epochs, **rates,
            target_frame_rate_range_hz=tuple(rng) if isinstance(rng, (list, tuple)) else rng,
        ))

    policy: FrameRatePolicy = field(init=False, default=None)  # from the rate keys (not a frontend_conf key)

    @classmethod
    def from_conf(cls, frontend_conf: Optional[Mapping]) -> "FrontendConfig":
        """The config of a ``frontend_conf`` mapping (``None``: every default).

        Raises:
            TypeError: a key the dynres frontend does not know (as its own constructor), naming the closest key.
        """
        conf = dict(frontend_conf or {})
        known = {f.name for f in fields(cls)} - {"policy"}
        unknown = sorted(set(conf) - known)
        if unknown:
            close = {k: difflib.get_close_matches(k, sorted(known), n=1) for k in unknown}
            hints = "; ".join(f"{k}: did you mean {c[0]}?" if c else f"{k}: not a dynres frontend key"
                              for k, c in close.items())
            raise TypeError(f"frontend: dynres got unexpected frontend_conf keys {unknown} ({hints}); "
                            "fix or remove them (docs/options.md lists the keys)")
        return cls(**conf)

    @property
    def mel_options(self) -> dict:
        """The mel filterbank's options (ESPnet's ``LogMel`` without ``fs``)."""
        return dict(n_fft=self.n_fft, n_mels=self.n_mels, fmin=self.fmin, fmax=self.fmax, htk=self.htk)
