"""The arithmetic of dynamic-resolution batching: frame rates and counts (:mod:`.frame_rate_policy`), the batch rules
(:mod:`.batch_planner`), the CTC minimum (:mod:`.ctc_minimum`) and features (:mod:`.features`); no ESPnet imports."""
