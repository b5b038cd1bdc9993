"""The CTC minimum of every training utterance, from its transcript as ESPnet's preprocessor tokenizes it."""

from __future__ import annotations

from typing import Dict, Optional

from espnet_dynres.core.ctc_minimum import ctc_frames_needed, min_feature_frames
from espnet_dynres.core.readers import read_keyed_file


def training_min_frames(task, args, text_path) -> Optional[Dict[str, int]]:
    """Fewest feature frames per utterance for CTC to stay possible, as training plans them.

    The one computation of the CTC minimum: training's iterator builder and the batch audit
    both call it.  For each line ``utt_id transcript`` of ``text_path``:
    ``min_feature_frames(U + R, encoder_conf.input_layer)``, with the token ids ``U`` (and
    adjacent repeats ``R``) that ESPnet's own preprocessor gives the model
    (``task.build_preprocess_fn(args, train=False)``: cleaner, tokenizer, token list).

    Args:
        task: ESPnet's task class (``ASRTask``).
        args: the task's parsed arguments (``model_conf``, ``encoder_conf``, the token options).
        text_path: Kaldi-style transcripts, ``utt_id text`` per line.

    Returns:
        ``{utt_id: feature frames}``, or ``None`` when the model has no CTC branch
        (``model_conf.ctc_weight: 0``) or no preprocessor (``use_preprocessor: false``).

    Raises:
        ValueError: a blank line or a repeated utterance in ``text_path``
            (:func:`espnet_dynres.core.readers.read_keyed_file`).
    """
    if float((args.model_conf or {}).get("ctc_weight", 0.5)) == 0.0:
        return None
    preprocess = task.build_preprocess_fn(args, train=False)
    if preprocess is None:
        return None
    input_layer = (args.encoder_conf or {}).get("input_layer", "conv2d")
    need: Dict[str, int] = {}
    for utt, text in read_keyed_file(text_path).items():
        ids = preprocess(utt, {"text": text})["text"]
        need[utt] = min_feature_frames(ctc_frames_needed(list(ids)), input_layer)
    return need
