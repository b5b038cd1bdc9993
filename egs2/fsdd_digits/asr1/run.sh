#!/usr/bin/env bash
# Connected-digit ASR on real speech (FSDD), with ESPnet's stage numbering:
#   1 data prep   2 speed perturbation   3 format (8 kHz -> fs)   4 filter   5 token list
#   10 collect stats   11 train   12 decode (standard frame rate)   13 score
#   15 pack (with a config stock ESPnet decodes) + unpack check
# Needs no ESPnet git checkout and no Kaldi tools: every stage is an ESPnet module
# (python -m espnet2.bin.* / espnet_dynres.bin.*) or a script under local/.
#
# Options (ESPnet asr.sh names):  ./run.sh --stage N --stop_stage M --ngpu K --nj J \
#     --asr_config FILE --inference_config FILE --asr_args "..." --inference_args "..." \
#     --expdir DIR --dumpdir DIR [--python PY --datadir DIR --asr_tag TAG --token_type word|char|bpe --nbpe N
#     --fs 16k --num_train N --num_dev N --num_test N --seed N --inference_nj N
#     --min_wav_duration SEC --max_wav_duration SEC --inference_asr_model NAME --fsdd_dir DIR
#     --results_readme FILE --corpus digits|longtail --local_data_opts "..." --test_tempo T1,T2,...
#     --speed_perturb_factors "F1 F2 ..." --test_speed F1,F2,...]
# --corpus digits (default): 3,000 connected-digit utterances, 0.2-38 s (local/data_prep.py).
# --corpus longtail: 320 train utterances, 3 s to 3 minutes, median 20 s (local/longtail_data_prep.py);
#     its own data_longtail/, dump_longtail/, exp_longtail/ and no duration filter unless given.
# --local_data_opts: extra options of the stage-1 script (see python local/<script>.py --help).
# --test_tempo 0.8,0.9,1.1,1.25: stage 1 also writes test_tempo<T>, the test set played T times as fast
#     with its pitch kept (local/tempo_perturb.py); stages 3, 12 and 13 treat each as another test set.
# --test_speed 0.9,1.1: stage 1 also writes test_speed<F>, the test set played F times as fast with pitch
#     and tempo moved together (SoX's speed; local/speed_perturb.py), another test set likewise.
# --speed_perturb_factors "0.9 1.0 1.1": as ESPnet's asr.sh, stage 2 adds speed-changed copies of the
#     training set (ids prefixed sp0.9-, sp1.1-) as train_sp, which every later stage uses for training
#     (shapes, stats and token list from it; stats in <expdir>/asr_stats_raw_<token_type>_sp); dev and
#     test sets stay as they are. --max_wav_duration's default grows by 1 / the smallest factor so that
#     no slowed copy is filtered out.
# Defaults: --asr_config conf/train_asr_conformer_dynres_cpu.yaml (its frontend_conf also sets stage 10's
#     statistics: give your config to stage 10 too), --inference_config conf/decode_asr_ctc_greedy.yaml.
set -euo pipefail

stage=1
stop_stage=100
ngpu=0
nj=2
inference_nj=2
seed=0
fs=16k
asr_config=conf/train_asr_conformer_dynres_cpu.yaml
inference_config=conf/decode_asr_ctc_greedy.yaml
asr_args=""
inference_args=""
asr_tag=""
corpus=digits
expdir=""           # default per corpus: exp, exp_longtail
dumpdir=""          # dump, dump_longtail
datadir=""          # data, data_longtail
token_type=word
nbpe=30
num_train=""        # digits: 3000 150 150; longtail: 320 60 60
num_dev=""
num_test=""
min_wav_duration=0.1
max_wav_duration="" # digits: 40; longtail: 300 (keeps every utterance)
inference_asr_model=valid.acc.ave.pth
fsdd_dir=../../../../shared/data/fsdd/recordings
python=python
local_data_opts=""  # extra options of stage 1's data script, as asr.sh's --local_data_opts
results_readme=""   # e.g. README.md: stage 13 also writes this experiment's RESULTS section there
test_tempo=""       # e.g. 0.8,0.9,1.1,1.25: tempo-changed copies of the test set (pitch kept)
test_speed=""       # e.g. 0.9,1.1: speed-changed copies of the test set (pitch moved with the tempo)
speed_perturb_factors=""  # e.g. "0.9 1.0 1.1": speed-perturbed training set (ESPnet's asr.sh stage 2)

usage() { sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --*)
            name="${1#--}"
            if ! declare -p "${name}" >/dev/null 2>&1 || [[ "${name}" == *-* ]]; then
                echo "run.sh: unknown option $1 (see ./run.sh --help)" >&2; exit 2
            fi
            [ $# -ge 2 ] || { echo "run.sh: option $1 needs a value" >&2; exit 2; }
            printf -v "${name}" '%s' "$2"; shift 2 ;;
        *) echo "run.sh: unexpected argument $1 (see ./run.sh --help)" >&2; exit 2 ;;
    esac
done

case "${corpus}" in
    digits) defaults=(exp dump data 3000 150 150 40); data_prep=local/data_prep.py ;;
    longtail) defaults=(exp_longtail dump_longtail data_longtail 320 60 60 300); data_prep=local/longtail_data_prep.py ;;
    *) echo "run.sh: --corpus must be digits or longtail, got '${corpus}'" >&2; exit 2 ;;
esac
max_wav_duration_given=0; [ -n "${max_wav_duration}" ] && max_wav_duration_given=1
: "${expdir:=${defaults[0]}}" "${dumpdir:=${defaults[1]}}" "${datadir:=${defaults[2]}}"
: "${num_train:=${defaults[3]}}" "${num_dev:=${defaults[4]}}" "${num_test:=${defaults[5]}}"
: "${max_wav_duration:=${defaults[6]}}"

cd "$(dirname "$0")"
. ./path.sh

log() { echo "$(date '+%Y-%m-%dT%H:%M:%S') (run.sh:${BASH_LINENO[0]}) $*"; }
fail() { log "ERROR: $1 failed; read the log: $2"; tail -n 20 "$2" >&2 || true; exit 1; }
# run_logged LOG CMD...: run CMD with its output in LOG, stop with the log's name on failure.
run_logged() { local lg=$1; shift; mkdir -p "$(dirname "${lg}")"; "$@" >"${lg}" 2>&1 || fail "$(basename "${lg}" .log)" "${lg}"; }

sp_factors=()
if [ -n "${speed_perturb_factors}" ]; then
    read -r -a sp_factors <<< "${speed_perturb_factors}"
    for f in "${sp_factors[@]}"; do
        [[ "${f}" =~ ^[0-9]*\.?[0-9]+$ ]] && [[ ! "${f}" =~ ^0*\.?0*$ ]] \
            || { echo "run.sh: --speed_perturb_factors takes positive numbers separated by spaces (e.g. \"0.9 1.0 1.1\"), got '${speed_perturb_factors}'" >&2; exit 2; }
    done
fi
# asr.sh: a tag from the config name gets _sp under speed perturbation; the stats dir always does.
[ -n "${asr_tag}" ] || asr_tag=$(basename "${asr_config}" .yaml)${speed_perturb_factors:+_sp}
asr_exp=${expdir}/asr_${asr_tag}
asr_stats_dir=${expdir}/asr_stats_raw_${token_type}${speed_perturb_factors:+_sp}  # one per data setup, as asr.sh
token_listdir=${datadir}/token_list/${token_type}
token_list=${token_listdir}/tokens.txt
bpemodel=none
[ "${token_type}" = bpe ] && bpemodel=${token_listdir}/bpe.model
train_set=train
[ -n "${speed_perturb_factors}" ] && train_set=train_sp
valid_set=dev
test_sets="test"
tempos=()
speeds=()
if [ -n "${test_tempo}" ]; then
    IFS=, read -r -a tempos <<< "${test_tempo}"
    for t in "${tempos[@]}"; do
        [[ "${t}" =~ ^[0-9]*\.?[0-9]+$ ]] && [ "${t}" != 0 ] \
            || { echo "run.sh: --test_tempo takes positive numbers separated by commas (e.g. 0.8,1.25), got '${test_tempo}'" >&2; exit 2; }
        test_sets+=" test_tempo${t}"
    done
fi
if [ -n "${test_speed}" ]; then
    IFS=, read -r -a speeds <<< "${test_speed}"
    for f in "${speeds[@]}"; do
        [[ "${f}" =~ ^[0-9]*\.?[0-9]+$ ]] && [[ ! "${f}" =~ ^0*\.?0*$ ]] \
            || { echo "run.sh: --test_speed takes positive numbers separated by commas (e.g. 0.9,1.1), got '${test_speed}'" >&2; exit 2; }
        test_sets+=" test_speed${f}"
    done
fi
if [ -n "${speed_perturb_factors}" ] && [ "${max_wav_duration_given:-}" != 1 ]; then
    # Keep every slowed copy: the corpus default / the smallest factor.
    max_wav_duration=$(printf '%s\n' "${sp_factors[@]}" | awk -v m="${max_wav_duration}" \
        'NR == 1 || $1 < f { f = $1 } END { printf "%.6g", m / f }')
fi
feats_dir=${dumpdir}/raw
frontend_name=$(${python} -c "import yaml,sys; print(yaml.safe_load(open(sys.argv[1])).get('frontend','default'))" "${asr_config}")

if [ "${stage}" -le 1 ] && [ "${stop_stage}" -ge 1 ]; then
    log "Stage 1: data prep: ${corpus} corpus from ${fsdd_dir} -> ${datadir}/{train,dev,test}"
    ${python} "${data_prep}" --fsdd_dir "${fsdd_dir}" --out_dir "${datadir}" --seed "${seed}" \
        --num_train "${num_train}" --num_dev "${num_dev}" --num_test "${num_test}" ${local_data_opts}
    for t in "${tempos[@]}"; do
        ${python} local/tempo_perturb.py --src "${datadir}/test" --dst "${datadir}/test_tempo${t}" --tempo "${t}"
    done
    for f in "${speeds[@]}"; do
        ${python} local/speed_perturb.py --src "${datadir}/test" --dst "${datadir}/test_speed${f}" --factors "${f}" --keep_ids
    done
fi

if [ "${stage}" -le 2 ] && [ "${stop_stage}" -ge 2 ]; then
    if [ -n "${speed_perturb_factors}" ]; then
        log "Stage 2: speed perturbation ${speed_perturb_factors}: ${datadir}/train -> ${datadir}/${train_set}"
        rm -rf "${datadir:?}/${train_set}"
        ${python} local/speed_perturb.py --src "${datadir}/train" --dst "${datadir}/${train_set}" --factors ${speed_perturb_factors}
    else
        log "Stage 2: speed perturbation: off (--speed_perturb_factors)"
    fi
fi

if [ "${stage}" -le 3 ] && [ "${stop_stage}" -ge 3 ]; then
    log "Stage 3: format: resample to ${fs} and write ${feats_dir}"
    for dset in ${train_set} ${valid_set} ${test_sets}; do
        if [ "${dset}" = "${train_set}" ] || [ "${dset}" = "${valid_set}" ]; then out=${feats_dir}/org/${dset}; else out=${feats_dir}/${dset}; fi
        ${python} local/format_wav.py --src "${datadir}/${dset}" --dst "${out}" --fs "${fs}"
    done
fi

if [ "${stage}" -le 4 ] && [ "${stop_stage}" -ge 4 ]; then
    log "Stage 4: filter: keep ${min_wav_duration}-${max_wav_duration} s in ${train_set}/${valid_set} (test sets untouched)"
    for dset in ${train_set} ${valid_set}; do
        ${python} local/filter_data.py --src "${feats_dir}/org/${dset}" --dst "${feats_dir}/${dset}" \
            --min_wav_duration "${min_wav_duration}" --max_wav_duration "${max_wav_duration}"
    done
fi

if [ "${stage}" -le 5 ] && [ "${stop_stage}" -ge 5 ]; then
    log "Stage 5: token list (${token_type}) -> ${token_list}"
    mkdir -p "${token_listdir}"
    cut -f 2- -d " " "${feats_dir}/${train_set}/text" > "${token_listdir}/train_text.txt"
    if [ "${token_type}" = bpe ]; then
        ${python} local/check_bpe_vocab.py --text "${token_listdir}/train_text.txt" --nbpe "${nbpe}"
        run_logged "${token_listdir}/spm_train.log" ${python} -m espnet2.bin.spm_train \
            --input="${token_listdir}/train_text.txt" --vocab_size="${nbpe}" --model_type=unigram \
            --model_prefix="${token_listdir}/bpe" --character_coverage=1.0 --input_sentence_size=100000000
    fi
    run_logged "${token_listdir}/tokenize.log" ${python} -m espnet2.bin.tokenize_text \
        --token_type "${token_type}" --bpemodel "${bpemodel}" --input "${token_listdir}/train_text.txt" \
        --output "${token_list}" --field 1- --cleaner none --write_vocabulary true \
        --add_symbol "<blank>:0" --add_symbol "<unk>:1" --add_symbol "<sos/eos>:-1"
    log "  $(wc -l < "${token_list}") tokens"
fi

common_args=(
    --use_preprocessor true --token_type "${token_type}" --token_list "${token_list}" --bpemodel "${bpemodel}"
    --train_data_path_and_name_and_type "${feats_dir}/${train_set}/wav.scp,speech,sound"
    --train_data_path_and_name_and_type "${feats_dir}/${train_set}/text,text,text"
    --valid_data_path_and_name_and_type "${feats_dir}/${valid_set}/wav.scp,speech,sound"
    --valid_data_path_and_name_and_type "${feats_dir}/${valid_set}/text,text,text"
    --frontend_conf "fs=${fs}"
)

if [ "${stage}" -le 10 ] && [ "${stop_stage}" -ge 10 ]; then
    log "Stage 10: collect stats (standard frame rate) -> ${asr_stats_dir}"
    _logdir=${asr_stats_dir}/logdir
    rm -rf "${_logdir}"; mkdir -p "${_logdir}"
    n=$(( nj < $(wc -l < "${feats_dir}/${valid_set}/wav.scp") ? nj : $(wc -l < "${feats_dir}/${valid_set}/wav.scp") ))
    split -n "l/${n}" -d -a 2 "${feats_dir}/${train_set}/wav.scp" "${_logdir}/train."
    split -n "l/${n}" -d -a 2 "${feats_dir}/${valid_set}/wav.scp" "${_logdir}/valid."
    pids=()
    for i in $(seq 1 "${n}"); do
        k=$(printf '%02d' $((i - 1)))
        ${python} -m espnet_dynres.bin.asr_train --collect_stats true "${common_args[@]}" \
            --train_shape_file "${_logdir}/train.${k}" --valid_shape_file "${_logdir}/valid.${k}" \
            --output_dir "${_logdir}/stats.${i}" --config "${asr_config}" ${asr_args} \
            >"${_logdir}/stats.${i}.log" 2>&1 &
        pids+=($!)
    done
    for i in "${!pids[@]}"; do wait "${pids[$i]}" || fail "collect stats job $((i + 1))" "${_logdir}/stats.$((i + 1)).log"; done
    inputs=(); for i in $(seq 1 "${n}"); do inputs+=(--input_dir "${_logdir}/stats.${i}"); done
    run_logged "${_logdir}/aggregate.log" ${python} -m espnet2.bin.aggregate_stats_dirs "${inputs[@]}" --output_dir "${asr_stats_dir}"
    for dset in train valid; do
        awk -v N="$(wc -l < "${token_list}")" '{ print $0 "," N }' "${asr_stats_dir}/${dset}/text_shape" \
            > "${asr_stats_dir}/${dset}/text_shape.${token_type}"
    done
    log "  stats: ${asr_stats_dir}/train/feats_stats.npz, shape files: ${asr_stats_dir}/{train,valid}/*_shape"
fi

if [ "${stage}" -le 11 ] && [ "${stop_stage}" -ge 11 ]; then
    log "Stage 11: train ${asr_config} -> ${asr_exp} (log: ${asr_exp}/train.log)"
    mkdir -p "${asr_exp}"
    start=$(date +%s)
    ${python} -m espnet_dynres.bin.asr_train "${common_args[@]}" \
        --train_shape_file "${asr_stats_dir}/train/speech_shape" \
        --train_shape_file "${asr_stats_dir}/train/text_shape.${token_type}" \
        --valid_shape_file "${asr_stats_dir}/valid/speech_shape" \
        --valid_shape_file "${asr_stats_dir}/valid/text_shape.${token_type}" \
        --normalize global_mvn --normalize_conf "stats_file=${asr_stats_dir}/train/feats_stats.npz" \
        --resume true --ngpu "${ngpu}" --output_dir "${asr_exp}" --config "${asr_config}" ${asr_args} \
        >"${asr_exp}/train.log" 2>&1 &
    pid=$!
    # Progress: one line per finished epoch.
    tail --pid="${pid}" -n +1 -F "${asr_exp}/train.log" 2>/dev/null | grep --line-buffered -E "epoch results:" \
        | sed -u -E 's/^.*\] //' || true
    wait "${pid}" || fail "training" "${asr_exp}/train.log"
    echo "$(( $(date +%s) - start ))" > "${asr_exp}/train_seconds.txt"
    log "  trained in $(cat "${asr_exp}/train_seconds.txt") s; model: ${asr_exp}/${inference_asr_model}"
fi

inference_tag=decode_$(basename "${inference_config}" .yaml)_${inference_asr_model%.*}
if [ "${stage}" -le 12 ] && [ "${stop_stage}" -ge 12 ]; then
    log "Stage 12: decode ${test_sets} at the standard frame rate -> ${asr_exp}/${inference_tag}"
    for dset in ${test_sets}; do
        _dir=${asr_exp}/${inference_tag}/${dset}
        _logdir=${_dir}/logdir
        rm -rf "${_logdir}"; mkdir -p "${_logdir}"
        n=$(( inference_nj < $(wc -l < "${feats_dir}/${dset}/wav.scp") ? inference_nj : $(wc -l < "${feats_dir}/${dset}/wav.scp") ))
        split -n "l/${n}" -d -a 2 "${feats_dir}/${dset}/wav.scp" "${_logdir}/keys."
        pids=()
        for i in $(seq 1 "${n}"); do
            k=$(printf '%02d' $((i - 1)))
            ${python} -m espnet_dynres.bin.asr_inference --batch_size 1 --ngpu "${ngpu}" \
                --data_path_and_name_and_type "${feats_dir}/${dset}/wav.scp,speech,sound" \
                --key_file "${_logdir}/keys.${k}" --asr_train_config "${asr_exp}/config.yaml" \
                --asr_model_file "${asr_exp}/${inference_asr_model}" --output_dir "${_logdir}/output.${i}" \
                --config "${inference_config}" ${inference_args} >"${_logdir}/asr_inference.${i}.log" 2>&1 &
            pids+=($!)
        done
        for i in "${!pids[@]}"; do wait "${pids[$i]}" || fail "decoding job $((i + 1))" "${_logdir}/asr_inference.$((i + 1)).log"; done
        for i in $(seq 1 "${n}"); do cat "${_logdir}/output.${i}/1best_recog/text"; done | LC_ALL=C sort > "${_dir}/text"
        log "  hypotheses: ${_dir}/text ($(wc -l < "${_dir}/text") of $(wc -l < "${feats_dir}/${dset}/text") utterances)"
    done
fi

if [ "${stage}" -le 13 ] && [ "${stop_stage}" -ge 13 ]; then
    log "Stage 13: score (WER, CER, by utterance length)"
    for dset in ${test_sets}; do
        _dir=${asr_exp}/${inference_tag}/${dset}
        ${python} local/score.py --ref "${feats_dir}/${dset}/text" --hyp "${_dir}/text" \
            --utt2dur "${datadir}/${dset}/utt2dur" --out_dir "${_dir}/score" --name "${dset}"
        log "  details: ${_dir}/score/result.txt, per utterance: ${_dir}/score/per_utt.tsv"
    done
    results=$(${python} local/write_results.py --exp "${asr_exp}" --decode_dir "${asr_exp}/${inference_tag}" \
        --sets ${test_sets} ${results_readme:+--readme "${results_readme}"})
    printf '%s\n' "${results}" | grep '^|' || true  # the tables (WER, CER); the file has the environment too
    log "  RESULTS (ESPnet's format): ${asr_exp}/RESULTS.md${results_readme:+ and ${results_readme}}"
fi

if [ "${stage}" -le 15 ] && [ "${stop_stage}" -ge 15 ]; then
    packed=${asr_exp}/${asr_tag}_packed.zip
    log "Stage 15: pack -> ${packed}, then unpack with espnet_model_zoo and decode one test file"
    [ -f "${asr_exp}/RESULTS.md" ] || { for dset in ${test_sets}; do cat "${asr_exp}/${inference_tag}/${dset}/score/result.txt"; done > "${asr_exp}/RESULTS.md"; }
    pack_opts=(--option "${asr_exp}/RESULTS.md" --option "${asr_stats_dir}/train/feats_stats.npz")
    [ -d "${asr_exp}/images" ] && pack_opts+=(--option "${asr_exp}/images")
    [ "${token_type}" = bpe ] && pack_opts+=(--option "${bpemodel}")
    # The packed config names ESPnet's own classes: stock ESPnet and espnet_model_zoo decode it without the plugin.
    run_logged "${asr_exp}/export_espnet_config.log" ${python} -m espnet_dynres.bin.export_espnet_config \
        --exp_dir "${asr_exp}"
    run_logged "${asr_exp}/pack.log" ${python} -m espnet2.bin.pack asr \
        --asr_train_config "${asr_exp}/config_espnet.yaml" --asr_model_file "${asr_exp}/${inference_asr_model}" \
        "${pack_opts[@]}" --outpath "${packed}"
    log "  packed: ${packed}"
    # A fresh cache: espnet_model_zoo would otherwise serve an older unpack of the same path.
    rm -rf "${expdir}/model_zoo_cache"
    first_test=$(echo ${test_sets} | cut -d ' ' -f 1)
    ${python} local/decode_packed.py --packed "${packed}" --cachedir "${expdir}/model_zoo_cache" \
        --wav_scp "${feats_dir}/${first_test}/wav.scp" --text "${feats_dir}/${first_test}/text"
fi

if [ "${stop_stage}" -ge 11 ] && [ -d "${asr_exp}" ]; then log "Done: stages ${stage}-${stop_stage}, ${asr_exp}"
else log "Done: stages ${stage}-${stop_stage} (data in ${datadir}, ${dumpdir}; stats in ${asr_stats_dir})"; fi
