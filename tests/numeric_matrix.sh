#!/usr/bin/env bash
# The fast tier under the settings a user's machine may have: OpenMP thread counts 1, 2 and 4, every
# ATen CPU kernel set the CPU supports (default, avx2, avx512), and the frontend, feature, planner,
# sampler and model tests (tests/asr, tests/core, tests/samplers) under torch.use_deterministic_algorithms.
# Prints one line per setting; exits non-zero if any failed. About 10 minutes on 2 cores.
set -uo pipefail
cd "$(dirname "$0")/.."
py=.venv/bin/python
caps="default avx2"
grep -q avx512f /proc/cpuinfo 2>/dev/null && caps="${caps} avx512"
failed=0
run() {  # label, env assignments..., -- pytest arguments (after "-m pytest")...
    local label=$1; shift
    local envs=()
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
    local out
    out=$(env "${envs[@]}" ${py} -m pytest -q -p no:cacheprovider "$@" 2>&1 | tail -1)
    printf '%-48s %s\n' "${label}" "${out}"
    case "${out}" in *failed*|*error*|"") failed=1 ;; esac
}
for t in 1 2 4; do
    run "OMP_NUM_THREADS=${t}" OMP_NUM_THREADS=${t} -- tests -m "not slow"
done
for c in ${caps}; do
    run "ATEN_CPU_CAPABILITY=${c}" ATEN_CPU_CAPABILITY=${c} -- tests -m "not slow"
done
run "use_deterministic_algorithms (asr, core, samplers)" -- tests/asr tests/core tests/samplers \
    -m "not slow" --deterministic-algorithms
exit ${failed}
