#!/usr/bin/env bash
# Loss-normalization study, part 2: train, decode (100 Hz) and score ESPnet's default model and
# model: token_normalized side by side on the mixed-length corpus (run prepare_data.sh first).
# The two runs differ only in `model` (conf/loss_normalization/*.yaml); each gets one CPU thread
# and they run at the same time, so they share the machine equally.
set -euo pipefail
cd "$(dirname "$0")/../../egs2/fsdd_digits/asr1"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
common=(--ngpu 0 --nj 1 --inference_nj 1 --datadir data/lossnorm_mixed --dumpdir dump/lossnorm_mixed
        --expdir exp/lossnorm_mixed --max_wav_duration 200 --inference_config conf/decode_asr.yaml)
pids=()
for model in espnet token_normalized; do
    ./run.sh --stage 11 --stop_stage 13 "${common[@]}" \
        --asr_config "conf/loss_normalization/train_asr_conformer_numel_${model}_cpu.yaml" \
        > "exp/lossnorm_mixed/run_${model}.log" 2>&1 &
    pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "${pid}" || status=1; done
exit "${status}"
