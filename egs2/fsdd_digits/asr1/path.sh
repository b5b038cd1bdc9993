# Activate the repository's virtual environment (created by ../../../install.sh) if present.
_repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
if [ -z "${VIRTUAL_ENV:-}" ] && [ -f "${_repo_root}/.venv/bin/activate" ]; then
    # shellcheck disable=SC1091
    . "${_repo_root}/.venv/bin/activate"
fi
export PYTHONUNBUFFERED=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
unset _repo_root
