"""The CTC minimum of every training utterance, from its transcript as ESPnet's preprocessor tokenizes it."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, Mapping, Optional, Tuple

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


def config_min_frames(conf: Mapping, text: Optional[str] = None, **token_options) -> Tuple[Optional[Dict[str, int]], str]:
    """:func:`training_min_frames` for a training config outside training (the batch audit, the
    converter), and a line saying what was applied.

    ESPnet's ASR defaults, then ``conf``'s values (as ESPnet rebuilds a model from its
    ``config.yaml``), then ``token_options`` that are not ``None`` (``token_list``, ``token_type``,
    ``bpemodel``, ``cleaner``); ``text`` (default: the config's training ``text`` entry) gives the
    transcripts.

    Raises:
        SystemExit: a transcript file that does not exist, or transcripts without a token list.
    """
    from espnet2.tasks.asr import ASRTask  # registration imports this module while ESPnet builds ASRTask

    # An experiment's config.yaml holds [path, name, type] lists; a command line, "path,name,type".
    entries = [e.split(",") if isinstance(e, str) else list(e) for e in conf.get("train_data_path_and_name_and_type") or []]
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
