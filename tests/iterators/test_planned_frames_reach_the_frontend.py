"""The batch key ``speech_frames`` reaches the dynres frontend through ``model: token_normalized``."""

import torch

from factory import build_tiny_model, pad_batch, random_text, real_utterances


def test_model_passes_the_plan_to_the_frontend():
    model = build_tiny_model().train()
    speech, lengths = pad_batch(real_utterances(3, concat=2))
    text, text_lengths = random_text(3, 4)
    seen = []
    model.frontend.register_forward_hook(lambda m, inp, out: seen.append(out[1].tolist()))
    rule, _ = model.frontend.frame_counts(lengths)  # the policy's own T for this batch
    highest = min(model.frontend.policy.frame_count_range(int(n))[1] for n in lengths)
    assert highest > int(rule[0])  # a different T is reachable, so the test can tell them apart
    plan = torch.full((3,), highest, dtype=torch.long)
    loss, _, _ = model(speech, lengths, text, text_lengths, speech_frames=plan, utt_id=["a", "b", "c"])
    assert seen[-1] == [highest] * 3 and torch.isfinite(loss)
    model(speech, lengths, text, text_lengths)  # without a plan: the policy's rule
    assert seen[-1] == rule.tolist()
