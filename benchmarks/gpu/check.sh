#!/usr/bin/env bash
# The GPU verification kit, in one command (docs/gpu.md): install the wheels prepare.sh gathered
# into a temporary folder, then run the checks (python -m benchmarks.gpu.check) with every flag
# passed on. On a lent GPU machine, from the repository root:
#   benchmarks/gpu/check.sh                 # report and CSVs to $OUT
#   benchmarks/gpu/check.sh --cpu-smoke --out /tmp/smoke   # the same script on a CPU, tiny sizes
#   benchmarks/gpu/check.sh --plan          # each check's planned seconds; starts nothing
# Environment: PYTHON (default .venv/bin/python where it exists, else python3) runs everything;
# WHEELS (default .whl) is the wheel folder.
# Without wheels there, the installed packages are used as they are (a development venv).
# Exit code: the checks' (0 none failed, 1 one failed, 2 bad input), or 3 when the install failed.
set -uo pipefail
cd "$(dirname "$0")/../.."

# The development venv where there is one (it never travels to a GPU machine), else the image's.
if [ -x .venv/bin/python ]; then default_python=.venv/bin/python; else default_python=python3; fi
PYTHON=${PYTHON:-$default_python}
export WHEELS=${WHEELS:-.whl}
export PYTHONUNBUFFERED=1

site=""
cleanup() { [ -n "$site" ] && rm -rf "$site"; }
trap cleanup EXIT

shopt -s nullglob
wheels=("$WHEELS"/*.whl)
# The wheels are the GPU image's Python's (3.12). A CPU smoke on a development machine with another
# Python (after prepare.sh filled .whl) uses the venv's packages instead of failing to install them.
py_version=$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
if [ ${#wheels[@]} -gt 0 ] && [ "$py_version" != "3.12" ] && [[ " $* " == *" --cpu-smoke "* ]]; then
  echo "[gpu-check] the wheels in $WHEELS are for Python 3.12, this is $py_version: a CPU smoke with the installed packages"
  wheels=()
fi
if [ ${#wheels[@]} -gt 0 ]; then
  site=$(mktemp -d /tmp/cockpit-gpu-site.XXXXXX)
  echo "[gpu-check] installing ${#wheels[@]} wheels from $WHEELS into $site"
  # --no-deps: the wheels are the whole set prepare.sh chose against the machine's image; pip
  # must not look for anything else (there is no network there).
  if ! "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" "${wheels[@]}"; then
    echo "[gpu-check] error: installing the wheels from $WHEELS failed (see above)" >&2
    exit 3
  fi
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
  # envpool's assets stay behind (prepare.sh): its import needs only their folders and metadata.
  if [ -f "$WHEELS/envpool-assets-stub.tar.gz" ] && [ -z "${ENVPOOL_ASSETS_PATH:-}" ]; then
    mkdir "$site/envpool-assets-stub" && tar -xzf "$WHEELS/envpool-assets-stub.tar.gz" -C "$site/envpool-assets-stub"
    export ENVPOOL_ASSETS_PATH="$site/envpool-assets-stub"
  fi
fi

"$PYTHON" -m benchmarks.gpu.check "$@"
