#!/usr/bin/env bash
# Loss-normalization study, part 1: the mixed-length corpus and its stats (docs/loss_normalization.md).
# Writes only under the recipe's ignored dirs: data/lossnorm_mixed, dump/lossnorm_mixed, exp/lossnorm_mixed.
set -euo pipefail
cd "$(dirname "$0")/../../egs2/fsdd_digits/asr1"
. ./path.sh
datadir=data/lossnorm_mixed dumpdir=dump/lossnorm_mixed expdir=exp/lossnorm_mixed
python local/mixed_length_data_prep.py --out_dir "${datadir}" --seed 0 \
    --num_train 150 --num_dev 30 --num_test 40 --num_long_train 4 --num_long_dev 1 --num_long_test 2 \
    --long_min_sec 60 --long_max_sec 90
# Stages 3-5 (format, filter with room for 2-minute utterances, token list) and 10 (collect stats, 100 Hz).
./run.sh --stage 3 --stop_stage 10 --ngpu 0 --nj 2 --datadir "${datadir}" --dumpdir "${dumpdir}" \
    --expdir "${expdir}" --max_wav_duration 200 \
    --asr_config conf/loss_normalization/train_asr_conformer_numel_espnet_cpu.yaml
