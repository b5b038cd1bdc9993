"""``frontend: default`` options that a ``frontend: dynres`` config may keep, and those it refuses."""

from __future__ import annotations

from typing import Optional

# DefaultFrontend's options that a config carried over from ``frontend: default`` may set, and the one
# value the dynres frontend computes with (it always frames with centred windows, unnormalised, one-sided
# STFT power, from raw audio); any other value is refused (check_default_frontend_options).
DEFAULT_FRONTEND_FIXED = {"center": True, "normalized": False, "onesided": True, "apply_stft": True}
# frontend_conf: DefaultFrontend's WPE / beamformer front-end for multi-channel input; only "both off" is accepted.
MULTICHANNEL_SWITCHES = ("use_wpe", "use_beamformer")


def check_default_frontend_options(center: bool = True, normalized: bool = False, onesided: bool = True,
                                   apply_stft: bool = True, frontend_conf: Optional[dict] = None) -> None:
    """Accept ``DefaultFrontend`` options that change nothing for the dynres frontend; refuse the rest.

    ``center: true``, ``normalized: false``, ``onesided: true`` and ``apply_stft: true`` are what
    the dynres frontend always does, so a config copied from ``frontend: default`` may keep them.
    ``frontend_conf`` (DefaultFrontend's WPE dereverberation and beamformer for multi-channel
    input) is accepted only with ``use_wpe`` and ``use_beamformer`` off, where DefaultFrontend
    itself leaves mono audio untouched.

    Raises:
        ValueError: naming the key, the value given, and why it cannot apply.
    """
    given = dict(center=center, normalized=normalized, onesided=onesided, apply_stft=apply_stft)
    why = {
        "center": "the dynres frontend frames with centred windows (1 + T_samples // hop_length frames, as "
                  "DefaultFrontend's default), which its frame-count rule depends on",
        "normalized": "the dynres frontend computes the unnormalised STFT power, as DefaultFrontend's default",
        "onesided": "the dynres frontend's mel filterbank takes the one-sided spectrum (n_fft // 2 + 1 bins)",
        "apply_stft": "the dynres frontend computes its features from raw audio; for extracted features use "
                      "frontend: null with input_size",
    }
    for key, fixed in DEFAULT_FRONTEND_FIXED.items():
        if given[key] is not fixed:
            raise ValueError(
                f"frontend_conf {key}: {given[key]} is not supported by frontend: dynres: {why[key]}. "
                f"Remove {key} from frontend_conf (or set it to {str(fixed).lower()})."
            )
    if frontend_conf:
        on = [k for k in MULTICHANNEL_SWITCHES if frontend_conf.get(k)]
        if on:
            raise ValueError(
                f"frontend_conf frontend_conf: {', '.join(f'{k}: true' for k in on)} (DefaultFrontend's WPE / "
                "beamformer for multi-channel input) is not supported by frontend: dynres, which takes mono audio "
                "and plans one frame rate per utterance. Remove frontend_conf from frontend_conf, or enhance / "
                "down-mix the audio when preparing the data."
            )
