#!/usr/bin/env bash
# The main job: install (if needed), then the fsdd_digits recipe on CPU, every stage,
# printing the test-set WER. Extra arguments go to run.sh (e.g. --asr_config ...).
set -euo pipefail
cd "$(dirname "$0")"
bash install.sh
cd egs2/fsdd_digits/asr1
exec ./run.sh "$@"  # RESULTS in ESPnet's format: exp/asr_<tag>/RESULTS.md (the tracked README stays as it is)
