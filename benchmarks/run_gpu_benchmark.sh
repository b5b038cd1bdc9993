#!/usr/bin/env bash
# The GPU benchmark in one command: dynres vs the numel baseline, short
# training of conf/train_asr_conformer_dynres.yaml with bf16 autocast (about 5 min on
# one H200; needs no network).  Extra arguments go to benchmarks/gpu_benchmark.py.
#
#   bash benchmarks/run_gpu_benchmark.sh                          # a GPU machine: the measurement
#   bash benchmarks/run_gpu_benchmark.sh --device cpu --dry_run   # anywhere: the code paths, tiny sizes
#
# --mode time_to_accuracy (first argument): the recipe's stages 1-10 on the 3,000 training
# utterances, then benchmarks/time_to_accuracy.py trains the main job's numel and dynres
# configs, 2 seeds each, 2 at a time on the one GPU, decodes them and writes
# time_to_accuracy.{json,md,png} (budgeted at under 9 minutes on one H200; not yet run on one).
#   bash benchmarks/run_gpu_benchmark.sh --mode time_to_accuracy
#   bash benchmarks/run_gpu_benchmark.sh --mode time_to_accuracy --device cpu --dry_run   # tiny, on CPU
#
# --mode longtail_finetune: the long-tailed loss study (docs/experiments/loss_normalization_longtail.md)
# on the GPU: the long-tailed corpus (stages 1-10), then per seed (SEEDS, default "0 1") the six arms of
# conf/longtail/ fine-tuned from the recipe's stock model of that seed, all seeds' arms at once on the
# one GPU (time_to_accuracy.py per arm and seed: training, valid figures, decoding; ARMS="name ..." for a
# subset), loss_stability.py per seed
# and the merged report.  The stock models (conf/train_asr_conformer_numel_cpu.yaml, 5 epochs on the
# digits corpus) are trained first, or taken from STOCK_DIR (A_s<SEED>.pth and the digits corpus's
# tokens.txt: the valid.acc.ave.pth and token list of a CPU run, so both machines start alike).
#   STOCK_DIR=stock bash benchmarks/run_gpu_benchmark.sh --mode longtail_finetune
#   bash benchmarks/run_gpu_benchmark.sh --mode longtail_finetune --device cpu --dry_run   # tiny, on CPU
#
# Results: gpu_benchmark.{json,md} and gpu_benchmark.log in $OUT when set, else in
# gpu_benchmark/results of the system temp dir ($TMPDIR, else /tmp).
#
# Python environment, first that works:
#   1. the repository's .venv (install.sh), if it imports torch;
#   2. python3, if it imports torch, torchaudio and ESPnet (a machine with a CUDA torch of its
#      own: install ESPnet for it first, python3 -m pip install espnet==202511).
#   The repository goes on PYTHONPATH (no pip install of the plugin: setup.py pins Python 3.11).
# FSDD recordings: $FSDD_DIR, else ../shared/data/fsdd/recordings beside the repository (the
# recipe's default).  Everything is checked before any work starts; a failed check names what
# is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
die() { echo "run_gpu_benchmark: $*" >&2; exit 1; }

mode=gpu_benchmark
if [ "${1:-}" = "--mode" ]; then
    mode=${2:?--mode needs gpu_benchmark, time_to_accuracy or longtail_finetune}; shift 2
fi
case "${mode}" in gpu_benchmark|time_to_accuracy|longtail_finetune) ;;
    *) die "unknown --mode ${mode} (gpu_benchmark, time_to_accuracy or longtail_finetune)" ;; esac
device=cuda
dry_run=false
for ((i = 1; i <= $#; i++)); do
    if [ "${!i}" = "--device" ]; then j=$((i + 1)); device=${!j:-cuda}; fi
    if [ "${!i}" = "--dry_run" ]; then dry_run=true; fi
done

# 1-2. Python with torch.
if [ -x .venv/bin/python ] && .venv/bin/python -c "import torch" 2>/dev/null; then
    py=${repo}/.venv/bin/python
    env_note="repository .venv"
elif command -v python3 >/dev/null && python3 -c "import torch, torchaudio" 2>/dev/null; then
    py=$(command -v python3)
    env_note="$(python3 -c 'import sys; print(sys.executable)') (preinstalled torch)"
    python3 -c "import espnet2" 2>/dev/null || die "ESPnet is not installed for ${py}: run install.sh (creates .venv,
  Python 3.11), or install ESPnet for this python: ${py} -m pip install espnet==202511"
else
    die "no Python with torch and torchaudio: run install.sh (creates .venv) or use a machine whose python3 has them."
fi
export PYTHONPATH="${repo}${PYTHONPATH:+:${PYTHONPATH}}"
export PYTHONUNBUFFERED=1

# Imports the benchmark needs, with a clear message for each that fails.
"${py}" - "${device}" <<'EOF' || die "the Python environment above is incomplete (see the import errors)."
import importlib, sys
missing = []
for name in ("torch", "torchaudio", "numpy", "yaml", "soundfile", "sentencepiece", "typeguard",
             "espnet2.tasks.asr", "espnet2.train.trainer", "espnet2.bin.tokenize_text", "espnet_dynres"):
    try:
        importlib.import_module(name)
    except Exception as e:  # report every failure, not only the first
        missing.append(f"  {name}: {type(e).__name__}: {e}")
if missing:
    print("run_gpu_benchmark: cannot import:\n" + "\n".join(missing), file=sys.stderr)
    sys.exit(1)
import torch
if sys.argv[1] == "cuda" and not torch.cuda.is_available():
    print("run_gpu_benchmark: --device cuda but torch.cuda.is_available() is False; "
          "for a CPU check pass --device cpu --dry_run", file=sys.stderr)
    sys.exit(1)
print(f"run_gpu_benchmark: python {sys.version.split()[0]}, torch {torch.__version__}, "
      f"device {torch.cuda.get_device_name(0) if sys.argv[1] == 'cuda' else 'cpu'}")
EOF

# FSDD recordings.
fsdd=${FSDD_DIR:-}
for cand in "${fsdd}" "${repo}/../shared/data/fsdd/recordings"; do
    if [ -n "${cand}" ] && ls "${cand}"/*.wav >/dev/null 2>&1; then fsdd=${cand}; break; fi
done
ls "${fsdd}"/*.wav >/dev/null 2>&1 || die "no FSDD recordings (*.wav) in \$FSDD_DIR (${FSDD_DIR:-unset}) or ${repo}/../shared/data/fsdd/recordings: set FSDD_DIR."

out=${OUT:-${TMPDIR:-/tmp}/gpu_benchmark/results}
mkdir -p "${out}"
echo "run_gpu_benchmark: environment: ${env_note}; FSDD: ${fsdd}; results: ${out}"
set -o pipefail
if [ "${mode}" = time_to_accuracy ]; then
    work=${TMPDIR:-/tmp}/time_to_accuracy_work
    rm -rf "${work}" && mkdir -p "${work}"
    recipe=${repo}/egs2/fsdd_digits/asr1
    if ${dry_run}; then  # the code paths on any machine: 24 utterances, the CI model, 1 epoch, 1 seed
        sizes=(--num_train 24 --num_dev 6 --num_test 4)
        arms=(--arm "dynres=${recipe}/conf/train_asr_conformer_dynres_ci.yaml")
        tta_opts=(--seeds 0 --max_epoch 1 --parallel 1 --threads 2 --ngpu 0 --num_train 24)
    else
        sizes=(--num_train 3000)
        arms=(--arm "numel=${recipe}/conf/train_asr_conformer_numel_cpu.yaml"
              --arm "dynres=${recipe}/conf/train_asr_conformer_dynres_cpu.yaml")
        tta_opts=(--seeds 0 1 --max_epoch 5 --parallel 2 --threads 4 --ngpu 1 --num_train 3000)
    fi
    (cd "${recipe}" && bash run.sh --stage 1 --stop_stage 10 --nj 8 --python "${py}" --fsdd_dir "${fsdd}" "${sizes[@]}" \
        --asr_config "${arms[1]#*=}" --datadir "${work}/data" --dumpdir "${work}/dump" --expdir "${work}/exp") \
        2>&1 | tee "${out}/time_to_accuracy_prep.log"
    "${py}" benchmarks/time_to_accuracy.py --recipe_dir "${recipe}" --datadir "${work}/data" --dumpdir "${work}/dump" \
        --expdir "${work}/exp" --out_dir "${out}" "${arms[@]}" "${tta_opts[@]}" 2>&1 | tee "${out}/time_to_accuracy.log"
    exit 0
fi
if [ "${mode}" = longtail_finetune ]; then
    work=${TMPDIR:-/tmp}/longtail_finetune_work
    rm -rf "${work}" && mkdir -p "${work}"
    recipe=${repo}/egs2/fsdd_digits/asr1
    read -r -a seeds <<< "${SEEDS:-0 1}"
    arms=(numel_espnet=conf/longtail/train_asr_conformer_numel_espnet_cpu.yaml
          numel_tokennorm=conf/longtail/train_asr_conformer_numel_token_normalized_cpu.yaml
          dynres_espnet=conf/longtail/train_asr_conformer_dynres_espnet_cpu.yaml
          dynres_tokennorm=conf/longtail/train_asr_conformer_dynres_token_normalized_cpu.yaml
          numel_espnet_clip100=conf/longtail/train_asr_conformer_numel_espnet_clip100_cpu.yaml
          numel_tokennorm_clip1p5=conf/longtail/train_asr_conformer_numel_token_normalized_clip1p5_cpu.yaml)
    if [ -n "${ARMS:-}" ]; then  # a subset, by name
        chosen=()
        for name in ${ARMS}; do
            found=""; for a in "${arms[@]}"; do [ "${a%%=*}" = "${name}" ] && found=${a}; done
            [ -n "${found}" ] || die "ARMS names ${name}, which is none of: ${arms[*]%%=*}"
            chosen+=("${found}")
        done
        arms=("${chosen[@]}")
    fi
    if ${dry_run}; then  # the code paths on any machine: a handful of utterances, 1 epoch, seed 0
        read -r -a seeds <<< "${SEEDS:-0}"
        digits_sizes=(--num_train 24 --num_dev 6 --num_test 4); lt_sizes=(--num_train 8 --num_dev 3 --num_test 3)
        ngpu=0; epochs=1; threads=1; protocol=(--nonstandard_protocol)  # 1 epoch of the 5-epoch configs
    else
        digits_sizes=(--num_train 3000); lt_sizes=(--num_train 320)
        ngpu=1; epochs=5; threads=1; protocol=()
    fi
    arm_args=(); for a in "${arms[@]}"; do arm_args+=(--arm "${a}"); done
    tta() { "${py}" benchmarks/time_to_accuracy.py --recipe_dir "${recipe}" --ngpu "${ngpu}" --threads "${threads}" \
                --max_epoch "${epochs}" ${protocol[@]+"${protocol[@]}"} "$@"; }
    stamp() { echo "run_gpu_benchmark: $(date +%T) $*"; }
    # Stock models: given, or the recipe's numel model of each seed trained here on the digits corpus.
    stock=${STOCK_DIR:-}
    if [ -z "${stock}" ]; then
        stock=${work}/stock; mkdir -p "${stock}"
        stamp "training the stock models (seeds ${seeds[*]})"
        (cd "${recipe}" && bash run.sh --stage 1 --stop_stage 10 --nj 8 --python "${py}" --fsdd_dir "${fsdd}" \
            "${digits_sizes[@]}" --datadir "${work}/data" --dumpdir "${work}/dump" --expdir "${work}/exp") \
            > "${out}/stock_prep.log" 2>&1 || die "digits corpus preparation failed: ${out}/stock_prep.log"
        tta --datadir "${work}/data" --dumpdir "${work}/dump" --expdir "${work}/exp" --out_dir "${out}/stock" \
            --arm A=conf/train_asr_conformer_numel_cpu.yaml --seeds "${seeds[@]}" --parallel "${#seeds[@]}" \
            --num_train "${digits_sizes[1]}" --skip_decode > "${out}/stock.log" 2>&1 || die "stock training failed: ${out}/stock.log"
        for s in "${seeds[@]}"; do cp "${work}/exp/asr_tta_A_s${s}/valid.acc.ave.pth" "${stock}/A_s${s}.pth"; done
        cp "${work}/data/token_list/word/tokens.txt" "${stock}/tokens.txt"
    fi
    stock=$(cd "${stock}" && pwd)
    for s in "${seeds[@]}"; do
        [ -f "${stock}/A_s${s}.pth" ] || die "no stock model ${stock}/A_s${s}.pth for seed ${s}"
    done
    [ -f "${stock}/tokens.txt" ] || die "no ${stock}/tokens.txt (the digits corpus's token list)"
    stamp "long-tailed corpus (stages 1-10)"
    (cd "${recipe}" && bash run.sh --corpus longtail --stage 1 --stop_stage 10 --nj 8 --python "${py}" \
        --fsdd_dir "${fsdd}" "${lt_sizes[@]}" --datadir "${work}/data_longtail" --dumpdir "${work}/dump_longtail" \
        --expdir "${work}/exp_longtail") > "${out}/longtail_prep.log" 2>&1 \
        || die "long-tailed corpus preparation failed: ${out}/longtail_prep.log"
    # One time_to_accuracy.py per arm and seed, all at once: each trains, decodes and evaluates its own
    # checkpoints, so none waits for another's report; --merge joins them afterwards.
    stamp "fine-tuning ${#arms[@]} arms x ${#seeds[@]} seeds at once"
    pids=(); tags=()
    for s in "${seeds[@]}"; do
        for a in "${arms[@]}"; do
            tag=ft_s${s}_${a%%=*}
            tta --datadir "${work}/data_longtail" --dumpdir "${work}/dump_longtail" --expdir "${work}/exp_longtail" \
                --out_dir "${out}/${tag}" --tag_prefix ft_ --arm "${a}" --seeds "${s}" --parallel 1 \
                --num_train "${lt_sizes[1]}" --decode_recipe_args "--corpus longtail" \
                --asr_args "--init_param ${stock}/A_s${s}.pth --token_list ${stock}/tokens.txt" \
                > "${out}/${tag}.log" 2>&1 &
            pids+=($!); tags+=("${tag}")
        done
    done
    for i in "${!pids[@]}"; do
        wait "${pids[$i]}" || die "${tags[$i]} failed: ${out}/${tags[$i]}.log"
    done
    stamp "loss_stability.py and the merged report"
    for s in "${seeds[@]}"; do
        ls_args=()
        for a in "${arms[@]}"; do
            name=${a%%=*}; d=${work}/exp_longtail/asr_ft_${name}_s${s}
            case "${name}" in *tokennorm*) ls_args+=(--arm "${name}=${d}") ;; *) ls_args+=(--arm "${name}=${d}:plan") ;; esac
        done
        (cd "${recipe}" && "${py}" "${repo}/benchmarks/loss_stability.py" --out_dir "${out}/loss_stability_s${s}" \
            --warmup_steps 100 --utt2dur "${work}/data_longtail/test/utt2dur" "${ls_args[@]}") \
            > "${out}/loss_stability_s${s}.log" 2>&1 || die "loss_stability.py failed: ${out}/loss_stability_s${s}.log"
    done
    merge=(); for t in "${tags[@]}"; do merge+=("${out}/${t}/time_to_accuracy.json"); done
    "${py}" benchmarks/time_to_accuracy.py --merge "${merge[@]}" --target_arm numel_espnet \
        --out_dir "${out}/ft_merged" > "${out}/ft_merged.log" 2>&1 || die "merge failed: ${out}/ft_merged.log"
    # Each arm's config, train.log and test scores, for the record.
    tar -C "${work}" -czf "${out}/longtail_finetune_exp.tgz" --exclude '*.pth' --exclude 'tensorboard' \
        --exclude 'att_ws' --exclude '*.ark' exp_longtail
    stamp "done: ${out}"
    exit 0
fi
"${py}" benchmarks/gpu_benchmark.py --fsdd_dir "${fsdd}" --out_dir "${out}" "$@" 2>&1 | tee "${out}/gpu_benchmark.log"
