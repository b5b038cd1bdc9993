"""The iterator builder: the dynres frontend's policy from the task's arguments."""

import pytest

from espnet2.tasks.asr import ASRTask

from espnet_dynres.glue import build_iter_factory


def test_asr_task_parser_accepts_the_switches():
    args = ASRTask.get_parser().parse_args(
        ["--output_dir", "x", "--token_list", "t", "--batch_type", "dynres",
         "--frontend", "dynres", "--model", "token_normalized",
         "--frontend_conf", "min_frame_rate_hz=80"]
    )
    assert (args.batch_type, args.frontend, args.model) == ("dynres", "dynres", "token_normalized")
    assert build_iter_factory.policy_from_args(args).min_frame_rate_hz == 80


def test_dynres_batches_need_the_dynres_frontend():
    args = ASRTask.get_parser().parse_args(["--output_dir", "x", "--token_list", "t", "--batch_type", "dynres"])
    with pytest.raises(ValueError, match="frontend: dynres"):
        build_iter_factory.policy_from_args(args)
