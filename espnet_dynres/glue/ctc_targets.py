"""The CTC minimum of every training utterance, from its transcript as ESPnet's preprocessor tokenizes it."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, Mapping, Optional, Tuple

from espnet_dynres.core.ctc_minimum import ctc_frames_needed, min_feature_frames
from espnet_dynres.core.readers import read_keyed_file


def training_min_frames(task, args, text_path) -> Optional[Dict[str, int]]:
    """``{utt_id: fewest feature frames for CTC}`` as training plans them; ``None`` without CTC or preprocessor.

    ``min_feature_frames(U + R, input_layer)`` per line of ``text_path`` (``task``'s tokens ``U``, repeats ``R``).

    Raises:
        ValueError: a blank line or a repeated utterance in ``text_path``.
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


def config_min_frames(conf: Mapping, text: Optional[str] = None,
                      **token_options) -> Tuple[Optional[Dict[str, int]], str]:
    """:func:`training_min_frames` for a training config outside training, and a line saying what was applied.

    Arguments: ESPnet's defaults, ``conf``, then non-``None`` ``token_options``; ``text``: default from ``conf``.

    Raises:
        SystemExit: a transcript file that does not exist, or transcripts without a token list.
    """
    from espnet2.tasks.asr import ASRTask  # registration imports this module while ESPnet builds ASRTask
    # config.yaml holds [path, name, type] lists; a command line, "path,name,type".
    entries = [e.split(",") if isinstance(e, str) else list(e)
               for e in conf.get("train_data_path_and_name_and_type") or []]
    text = text or next((e[0] for e in entries if e[1:2] == ["text"]), None)
    if float((conf.get("model_conf") or {}).get("ctc_weight", 0.5)) == 0.0:
        return None, "none (the model has no CTC branch: model_conf.ctc_weight 0)"
    if text is None:
        return None, "not applied: give --text and --token_list (training applies it from the transcripts)"
    if not Path(text).is_file():
        raise SystemExit(f"--text {text}: no such file; give the training transcripts ('utt_id text' per line)")
    if (token_options.get("token_list") or conf.get("token_list")) is None:
        raise SystemExit("the CTC minimum needs the token list of training: give --token_list (or an experiment's "
                         "config.yaml as --config)")
    args = ASRTask.get_parser().parse_args(["--output_dir", "unused"])
    for key, value in conf.items():
        setattr(args, key, value)
    for key, value in token_options.items():
        if value is not None:
            setattr(args, key, value)
    args.use_preprocessor = True
    need = training_min_frames(ASRTask, args, text)
    input_layer = (args.encoder_conf or {}).get("input_layer", "conv2d")
    return need, f"from {text} ({args.token_type} tokens plus adjacent repeats, encoder input_layer {input_layer})"
