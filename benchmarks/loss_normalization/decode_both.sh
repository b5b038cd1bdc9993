#!/usr/bin/env bash
# Loss-normalization study, part 2b: decode (100 Hz, conf/decode_asr.yaml) and score both runs with the
# checkpoint of one epoch, e.g. `decode_both.sh 7epoch.pth` when training had to stop after epoch 7.
# Default: ESPnet's averaged model valid.acc.ave.pth (written when training finishes).
set -euo pipefail
model=${1:-valid.acc.ave.pth}
cd "$(dirname "$0")/../../egs2/fsdd_digits/asr1"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
common=(--ngpu 0 --nj 1 --inference_nj 1 --datadir data/lossnorm_mixed --dumpdir dump/lossnorm_mixed
        --expdir exp/lossnorm_mixed --inference_config conf/decode_asr.yaml --inference_asr_model "${model}")
pids=()
for m in espnet token_normalized; do
    ./run.sh --stage 12 --stop_stage 13 "${common[@]}" \
        --asr_config "conf/loss_normalization/train_asr_conformer_numel_${m}_cpu.yaml" \
        > "exp/lossnorm_mixed/decode_${m}_${model%.pth}.log" 2>&1 &
    pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "${pid}" || status=1; done
exit "${status}"
