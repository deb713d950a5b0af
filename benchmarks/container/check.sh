#!/usr/bin/env bash
# The container check (docs/cloud.md): builds the repository's Dockerfile on a small Debian base with
# the CPU torch, then runs cockpit in it as a pod would, all with rootful podman on this machine:
#   1. base:    mmdebstrap a Debian bookworm rootfs (python3, venv, pip, ca-certificates, tini) and
#               `podman import` it;
#   2. image:   `podman build --format docker --build-arg BASE=<that> --build-arg TORCH_INDEX=<local CPU
#               index>`, pip's index URLs as build secrets; the image's user is UID 10001, it has a
#               HEALTHCHECK and its history holds no index URL;
#      CUDA:    the image on the Dockerfile's own CUDA base (BASE's default, by digest) with PyPI's
#               torch, where podman has that base or can pull it; where not, one line says so;
#   3. run:     a 2-job CartPole run in the container, /runs bind-mounted, to done; the time from
#               the container's start to a job's first step;
#   4. fleet:   a 4-agent, 2-tier CartPole fleet, SIGKILLed (`podman kill -s KILL`) once agents have
#               checkpointed (the HEALTHCHECK run on it first), started again with the same command:
#               it resumes and finishes, every model verifies (`cockpit report`) and --on-done ran
#               exactly once.
# From the repository root (as root):  benchmarks/container/check.sh [--probe | --cuda]
#   --cuda    only the CUDA step: build the CUDA variant, or say in one line why it cannot be.
#   --probe   only check that podman can run the check's containers here: exit 0 if so; 1, with
#             podman's own error on the last line of stderr, where podman cannot start any container
#             on this machine (the pytest wrapper skips on it, and only on it); 3 where the check's own
#             podman options are at fault (an option podman refuses, or options that fail where a
#             plain container starts): the wrapper fails on that.
# Environment: WORK (default a new /var/tmp/cockpit-container.XXXXXX, removed at the end unless
# KEEP=1; so is the image, while the base stays for REUSE_BASE; a failed build's cached layers stay
# as <none> images: `podman image prune`), MIRROR (Debian mirror, default
# http://deb.debian.org/debian), PYTHON (runs pip on the host, default .venv/bin/python else
# python3), IMAGE (default localhost/cockpit:check), REUSE_BASE=1 (keep a base image built before
# instead of building it again), CUDA_BASE (default the Dockerfile's BASE).
# Exit code: 0 every check passed, 1 one failed (the reason is printed), 2 podman cannot run any
# container here.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD

MIRROR=${MIRROR:-http://deb.debian.org/debian}
IMAGE=${IMAGE:-localhost/cockpit:check}
BASE_IMAGE=${BASE_IMAGE:-localhost/cockpit-check-base:bookworm}
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
if [ -x .venv/bin/python ]; then PYTHON=${PYTHON:-.venv/bin/python}; else PYTHON=${PYTHON:-python3}; fi
TAG="cockpit-check-$$"

log() { echo "[container] $*"; }
fail() {
  echo "[container] FAIL: $*" >&2
  exit 1
}

# Podman as this sandbox lets it run (each found by trying; see docs/cloud.md, "The check"):
# - runc, not crun: crun refuses the hybrid cgroup v1/v2 mounts here ("cgroups in hybrid mode not
#   supported") and cannot set RLIMIT_NPROC; cgroupfs: no systemd; events to a file: no journald;
# - limits no higher than this shell's: podman's defaults (1048576 open files and processes) need
#   CAP_SYS_RESOURCE, which the sandbox lacks ("setrlimit RLIMIT_NOFILE: Operation not permitted");
# - the host's network: no CNI bridge, and the build's pip reaches the same sources the host's does.
RUNTIME=${RUNTIME:-$(command -v runc >/dev/null && echo runc || echo crun)}
# - no systemd to time the image's HEALTHCHECK: podman says so on stderr at each container's start
#   ("unable to get systemd connection to add healthchecks"), which is filtered out; the check runs
#   the HEALTHCHECK by hand (`podman healthcheck run`).
pm() {
  if [ "${1:-}" = run ]; then
    podman --runtime "$RUNTIME" --cgroup-manager cgroupfs --events-backend file "$@" \
      2> >(grep -v 'unable to get systemd connection' >&2)
  else
    podman --runtime "$RUNTIME" --cgroup-manager cgroupfs --events-backend file "$@"
  fi
}
nofile=$(ulimit -n)
nproc=$(ulimit -u)
[ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ] && nproc=32768
[ "$nofile" = unlimited ] || [ "$nofile" -gt 65536 ] && nofile=65536
RUN_OPTS=(--network host --ulimit "nofile=$nofile:$nofile" --ulimit "nproc=$nproc:$nproc")

WORK=${WORK:-}
own_work=0
if [ -z "$WORK" ]; then
  WORK=$(mktemp -d /var/tmp/cockpit-container.XXXXXX)
  own_work=1
fi
containers=()
# Images this check replaced (a rebuilt tag leaves the old image behind, 2.3 GB each) or built.
old_images=()
cleanup() {
  local c
  for c in "${containers[@]}"; do pm rm -f "$c" >/dev/null 2>&1 || true; done
  local current
  # `|| true`: with no image of that tag (a check that built none yet), inspect exits 125, and
  # under `set -e -o pipefail` that would become the script's exit code from inside this trap.
  current=" $(pm image inspect --format '{{.Id}}' "$IMAGE" "$BASE_IMAGE" 2>/dev/null | tr '\n' ' ' || true) "
  for c in "${old_images[@]}"; do
    # Not one still tagged: a build wholly from cache gives the image the same id.
    if [ -n "$c" ] && [[ "$current" != *" $c "* ]]; then pm rmi "$c" >/dev/null 2>&1 || true; fi
  done
  if [ "${KEEP:-0}" != 1 ]; then
    # The base stays for REUSE_BASE=1 (249 MB); the image goes (KEEP=1 keeps it to look at).
    pm rmi "$IMAGE" >/dev/null 2>&1 || true
    if [ "$own_work" = 1 ]; then rm -rf "$WORK"; fi
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A container that runs /bin/true from a rootfs of just that binary and its libraries, with the
# check's own options: whether podman can start the check's containers here, independent of any
# image. Returns 0 if it can; 1 where podman cannot start any container on this machine (the last
# line of stderr is podman's own error); 3 where the check's options are at fault. The machine
# refuses a container in its OCI runtime (podman-run(1), EXIT STATUS: 126, "Error: ...: OCI ...":
# the kernel's namespaces, cgroups or limits); an error podman raises itself before that (125: an
# unknown flag, an option value that fails to parse, a network that does not exist) is the check's.
# So is a runtime's refusal where a plain container (podman's defaults, each runtime installed)
# starts.
probe() {
  command -v podman >/dev/null || {
    echo "podman is not installed (apt-get install podman runc)" >&2
    return 1
  }
  local root="$WORK/probe-root" lib out code=0 runtime
  mkdir -p "$root/bin"
  cp /bin/true "$root/bin/true"
  for lib in $(ldd /bin/true | grep -o '/[^ ]*'); do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done
  out=$(pm run --rm "${RUN_OPTS[@]}" --name "$TAG-probe" --rootfs "$root" /bin/true 2>&1) || code=$?
  [ "$code" = 0 ] && return 0
  local said
  said=$(echo "$out" | grep -m1 '^Error: ' || echo "$out" | tail -1)
  if [ "$code" != 126 ] && ! echo "$out" | grep -q 'OCI'; then
    echo "podman refused the check's own container (exit $code), not its runtime on this kernel: $said" >&2
    return 3
  fi
  for runtime in runc crun; do
    command -v "$runtime" >/dev/null || continue
    if podman --runtime "$runtime" run --rm --name "$TAG-plain" --rootfs "$root" /bin/true >/dev/null 2>&1; then
      echo "podman starts a plain container here (runtime $runtime), but not with the check's options: $said" >&2
      return 3
    fi
  done
  echo "podman cannot run a container here (runtime $RUNTIME): $said" >&2
  return 1
}

# The build's options from the host's pip sources: sets index_url, extra_urls and build_opts.
pip_sources() {
  # The build's pip looks where the host's does: its index, extra indexes and find-links (from pip's
  # config and PIP_* variables), each local directory bind-mounted read-only at the same path.
  pip_get() {
    local v
    v=$("$PYTHON" -m pip config get "global.$1" 2>/dev/null) || v=""
    echo "$v"
  }
  index_url=${PIP_INDEX_URL:-$(pip_get index-url)}
  extra_urls=${PIP_EXTRA_INDEX_URL:-$(pip_get extra-index-url)}
  find_links=${PIP_FIND_LINKS:-$(pip_get find-links)}
  # A proxy between this machine and PyPI may re-sign TLS with its own CA (here it does: pip in the
  # build fails with CERTIFICATE_VERIFY_FAILED without it): the host's CA bundle goes in too.
  cert=${PIP_CERT:-$(pip_get cert)}
  build_opts=(--network host --format docker --ulimit "nofile=$nofile:$nofile" --ulimit "nproc=$nproc:$nproc")
  # An index's pages link to files beside it (/opt/pypi/simple/x/ to /opt/pypi/files/): its parent goes.
  for src in $extra_urls $index_url; do
    path=${src#file://}
    if [ -d "$path" ]; then build_opts+=(-v "$(dirname "$path"):$(dirname "$path"):ro"); fi
  done
  for src in $find_links; do
    path=${src#file://}
    if [ -d "$path" ]; then build_opts+=(-v "$path:$path:ro"); fi
  done
  if [ -n "$cert" ] && [ -f "$cert" ]; then
    build_opts+=(-v "$cert:/run/host-ca.pem:ro" --build-arg PIP_CERT=/run/host-ca.pem)
  fi
  # The index URLs go in as build secrets (the Dockerfile's RUN --mount=type=secret), as an index URL
  # with a password must: a build argument would stay in the image's history.
  mkdir -p "$WORK/secrets"
  printf '%s' "$index_url" >"$WORK/secrets/pip_index_url"
  printf '%s' "$extra_urls" >"$WORK/secrets/pip_extra_index_url"
  build_opts+=(--secret "id=pip_index_url,src=$WORK/secrets/pip_index_url"
    --secret "id=pip_extra_index_url,src=$WORK/secrets/pip_extra_index_url"
    --build-arg "PIP_FIND_LINKS=$find_links")
  log "pip sources for the build: index ${index_url:-PyPI} extra [$extra_urls] find-links [$find_links] cert [$cert]"
}

# The CUDA variant: the Dockerfile on its own CUDA base with PyPI's (CUDA) torch, built wherever
# podman has that base or can pull it, and torch imported in it (no GPU needed for that). Where the
# base cannot be had, one line says so with podman's own words: never a silent pass.
cuda_variant() {
  local said
  # The CUDA base as the Dockerfile pins it (its `ARG BASE=` default).
  CUDA_BASE=${CUDA_BASE:-$(sed -n 's/^ARG BASE=//p' "$REPO/Dockerfile")}
  if ! pm image exists "$CUDA_BASE" && ! said=$(timeout 180 podman --runtime "$RUNTIME" --cgroup-manager cgroupfs --events-backend file \
    pull --quiet "$CUDA_BASE" 2>&1 >/dev/null); then
    said=$(echo "$said" | grep -m1 '^Error: ' || echo "$said" | tail -1)
    log "CUDA variant: NOT BUILT: its base $CUDA_BASE cannot be had on this machine: ${said:-timed out}"
    return 0
  fi
  log "CUDA variant: podman build --build-arg BASE=$CUDA_BASE -t $IMAGE-cuda . (torch from PyPI)"
  old_images+=("$(pm image inspect --format '{{.Id}}' "$IMAGE-cuda" 2>/dev/null || true)")
  pm build --quiet "${build_opts[@]}" --build-arg "BASE=$CUDA_BASE" \
    -t "$IMAGE-cuda" -f Dockerfile "$REPO" >"$WORK/build-cuda.log" 2>&1 || {
    tail -30 "$WORK/build-cuda.log" >&2
    fail "the CUDA variant's build failed on $CUDA_BASE (last lines above)"
  }
  pm run --rm "${RUN_OPTS[@]}" --name "$TAG-cuda" --entrypoint python "$IMAGE-cuda" \
    -c 'import torch; print("[container] CUDA variant: BUILT; in it: torch", torch.__version__, "cuda", torch.version.cuda)' ||
    fail "torch does not import in the CUDA variant"
  pm rmi "$IMAGE-cuda" >/dev/null 2>&1 || true
}

probed=0
probe || probed=$?
if [ "${1:-}" = --probe ]; then
  [ "$probed" = 0 ] || exit "$probed"
  log "podman runs containers here (runtime $RUNTIME)"
  exit 0
fi
[ "$probed" = 1 ] && exit 2
[ "$probed" = 0 ] || fail "the probe found the check itself at fault (above)"
if [ "${1:-}" = --cuda ]; then
  pip_sources
  cuda_variant
  exit 0
fi
command -v mmdebstrap >/dev/null || fail "mmdebstrap is not installed (apt-get install mmdebstrap)"

# ---------------------------------------------------------------------------------------------- base
if [ "${REUSE_BASE:-0}" = 1 ] && pm image exists "$BASE_IMAGE"; then
  log "1. base: $BASE_IMAGE as it is (REUSE_BASE=1)"
  base_build_s="(reused)"
else
  old_images+=("$(pm image inspect --format '{{.Id}}' "$BASE_IMAGE" 2>/dev/null || true)")
  log "1. base: mmdebstrap bookworm from $MIRROR | podman import - $BASE_IMAGE"
  t0=$(date +%s.%N)
  mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates,tini \
    bookworm - "$MIRROR" | pm import --quiet - "$BASE_IMAGE" >/dev/null
  t1=$(date +%s.%N)
  base_build_s=$(awk "BEGIN { printf \"%.1f\", $t1 - $t0 }")
fi
base_size=$(pm image inspect --format '{{.Size}}' "$BASE_IMAGE")
log "base built in ${base_build_s} s, size $base_size bytes ($((base_size / 1048576)) MiB)"

# --------------------------------------------------------------------------------------- torch index
# The CPU torch for the base's Python, as a one-package-set pip index (PEP 503) that the build reads
# through TORCH_INDEX: torch 2.13.0+cpu and its dependencies, fetched by the host's pip from wherever
# the host's pip finds them (download.pytorch.org/whl/cpu is the public index that holds the same).
pyver=$(pm run --rm "${RUN_OPTS[@]}" --name "$TAG-pyver" "$BASE_IMAGE" \
  python3 -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')
index="$WORK/torch-index"
mkdir -p "$index/files"
log "torch index: torch==$TORCH_VERSION+cpu for cp$pyver"
"$PYTHON" -m pip download -q --only-binary=:all: --python-version "$pyver" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 \
  -c <(sed -n 's/^\([A-Za-z0-9._-]*==[^ ]*\).*/\1/p' container/requirements.txt) \
  -d "$index/files" "torch==$TORCH_VERSION+cpu" 2> >(grep -v 'is ignored: it is neither' >&2) ||
  fail "pip could not fetch torch==$TORCH_VERSION+cpu (pip config list: where the host's pip looks)"
"$PYTHON" - "$index" <<'EOF'
import html, pathlib, re, sys
root = pathlib.Path(sys.argv[1])
by_name = {}
for wheel in sorted((root / "files").iterdir()):
    name = re.sub(r"[-_.]+", "-", wheel.name.split("-")[0]).lower()
    by_name.setdefault(name, []).append(wheel.name)
for name, files in by_name.items():
    (root / name).mkdir(exist_ok=True)
    links = "".join(f'<a href="../files/{html.escape(f)}">{html.escape(f)}</a>\n' for f in files)
    (root / name / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{links}</body></html>\n")
EOF
pip_sources
build_opts+=(-v "$index:/torch-index:ro")

# --------------------------------------------------------------------------------------------- image
log "2. image: podman build --format docker --build-arg BASE=$BASE_IMAGE --build-arg TORCH_INDEX=file:///torch-index --secret id=pip_index_url,... -t $IMAGE ."
old_images+=("$(pm image inspect --format '{{.Id}}' "$IMAGE" 2>/dev/null || true)")
t0=$(date +%s.%N)
pm build --quiet "${build_opts[@]}" \
  --build-arg "BASE=$BASE_IMAGE" --build-arg TORCH_INDEX=file:///torch-index \
  -t "$IMAGE" -f Dockerfile "$REPO" >"$WORK/build.log" 2>&1 || {
  tail -30 "$WORK/build.log" >&2
  fail "podman build failed (last lines above)"
}
t1=$(date +%s.%N)
image_build_s=$(awk "BEGIN { printf \"%.1f\", $t1 - $t0 }")
image_size=$(pm image inspect --format '{{.Size}}' "$IMAGE")
grep -v 'is ignored: it is neither' "$WORK/build.log" | tail -3 | sed 's/^/[container]   build | /'
log "image built in ${image_build_s} s, size $image_size bytes ($((image_size / 1048576)) MiB)"
pm run --rm "${RUN_OPTS[@]}" --name "$TAG-ver" --entrypoint python "$IMAGE" \
  -c 'import torch, cockpit; print("[container] in the image: torch", torch.__version__, "as uid", __import__("os").getuid())'
healthcheck=$(pm image inspect --format '{{.HealthCheck.Test}}' "$IMAGE")
[[ "$healthcheck" == *healthcheck.py* ]] || fail "the image has no HEALTHCHECK running healthcheck.py: [$healthcheck]"
log "HEALTHCHECK: $healthcheck"
history=$(pm history --no-trunc --format '{{.CreatedBy}}' "$IMAGE")
for url in $index_url $extra_urls; do
  [[ "$history" != *"$url"* ]] || fail "the image's history holds the index URL $url"
done
log "the image's history ($(echo "$history" | wc -l) steps) holds none of the build's index URLs [$index_url $extra_urls]"
cuda_variant

# ------------------------------------------------------------------------------------ run and fleet
# /runs on the host: owned by the image's user, as a pod's volume is (docs/cloud.md, "The volume").
RUNS="$WORK/runs"
mkdir -p "$RUNS"
uid=$(pm run --rm "${RUN_OPTS[@]}" --name "$TAG-uid" --entrypoint id "$IMAGE" -u)
gid=$(pm run --rm "${RUN_OPTS[@]}" --name "$TAG-gid" --entrypoint id "$IMAGE" -g)
[ "$uid" = 10001 ] || fail "the image's user is UID $uid, not 10001"
chown "$uid:$gid" "$RUNS"
# The on-done command writes its status to a file: it must have run exactly once per run.
# shellcheck disable=SC2016 # expanded by the shell --on-done starts, in the container
on_done='echo "$COCKPIT_RUN_STATUS $COCKPIT_RUN_NAME" >> /runs/on-done-$COCKPIT_RUN_NAME.txt'

# Starts a detached container with the image's entrypoint and ARGS; prints its name.
start() {
  local name=$1
  shift
  pm run -d "${RUN_OPTS[@]}" --name "$name" -v "$RUNS:/runs" "$IMAGE" "$@" >/dev/null
  containers+=("$name")
}
# Waits for the container to exit; prints its exit code.
wait_exit() { pm wait "$1"; }
# `cockpit report RUN_DIR` in the image (not through the entrypoint); its output and exit code.
report() { pm run --rm "${RUN_OPTS[@]}" --name "$TAG-report" -v "$RUNS:/runs" --entrypoint cockpit "$IMAGE" report "$1"; }
started_at() { pm inspect --format '{{.State.StartedAt}}' "$1"; }

# Seconds from the container's start to each job's `started` and first `phase` event.
first_step() {
  "$PYTHON" - "$1" "$2" <<'PY'
import datetime, json, pathlib, re, sys
started = sys.argv[2]  # podman: 2026-11-28 12:00:01.123456789 +0000 UTC
m = re.match(r"(\S+ \d+:\d+:\d+)(\.\d+)? ([+-]\d{4})", started)
t0 = datetime.datetime.strptime(m.group(1) + " " + m.group(3), "%Y-%m-%d %H:%M:%S %z").timestamp()
t0 += float(m.group(2) or 0)
for events in sorted(pathlib.Path(sys.argv[1]).glob("jobs/*/events.jsonl")):
    first = {}
    for line in events.read_text().splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue
        first.setdefault(e["kind"], e)
    s, p = first.get("started"), first.get("phase")
    print(f"[container]   job {events.parent.name}: started +{s['t'] - t0:.2f} s (worker startup_s "
          f"{s.get('startup_s')}), first step (first phase event) +{p['t'] - t0:.2f} s after the container started")
PY
}

log "3. run: 2 CartPole jobs, 10,000 steps each, in the container, /runs bind-mounted"
run_args=(run --name cartpole --preset cartpole --jobs 2 --timesteps 10000 --on-done "$on_done")
start "$TAG-run" "${run_args[@]}"
rc=$(wait_exit "$TAG-run")
pm logs "$TAG-run" 2>&1 | tail -5 | sed 's/^/[container]   | /'
[ "$rc" = 0 ] || fail "the run's container exited $rc"
log "time from the container's start ($(started_at "$TAG-run")):"
first_step "$RUNS/cartpole" "$(started_at "$TAG-run")"
report "/runs/cartpole" >"$WORK/run-report.txt" || fail "cockpit report /runs/cartpole failed: $(tail -3 "$WORK/run-report.txt")"
[ "$(cat "$RUNS/on-done-cartpole.txt")" = "done cartpole" ] ||
  fail "--on-done: expected one 'done cartpole' line, got: $(cat "$RUNS/on-done-cartpole.txt" 2>&1)"
log "run done; --on-done ran once: $(cat "$RUNS/on-done-cartpole.txt")"

log "4. fleet: 4 CartPole agents, tiers 8k then 16k steps (the best 2), SIGKILLed mid-tier-2, started again"
cat >"$RUNS/pod.toml" <<'TOML'
name = "pod"
jobs = 2
[agents]
env = "CartPole-v1"
preset = "cartpole"
seeds = 4
[agents.overrides]
checkpoint_every = [2_560]  # 10 rollouts: checkpoints inside tier 2 to resume from
[[tiers]]
timesteps = 8_000
promote = 2
[[tiers]]
timesteps = 16_000
[score]
episodes = 5
TOML
chown "$uid:$gid" "$RUNS/pod.toml"
fleet_args=(fleet /runs/pod.toml --on-done "$on_done")
start "$TAG-fleet1" "${fleet_args[@]}"
# Kill once an agent has checkpointed inside tier 2 (past 8k, short of 16k): its steps since then
# are lost, and it must resume from that checkpoint.
killed=""
for _ in $(seq 1 1200); do
  if [ "$(pm inspect --format '{{.State.Running}}' "$TAG-fleet1")" != true ]; then
    pm logs "$TAG-fleet1" 2>&1 | tail -10 >&2
    fail "the fleet ended before it could be killed mid-tier-2"
  fi
  if cat "$RUNS"/pod/jobs/*/events.jsonl 2>/dev/null |
    grep '"kind": *"checkpoint"' | grep -Eq '"step": *(8[1-9][0-9]{2}|9[0-9]{3}|1[0-5][0-9]{3})[,}]'; then
    health=$(pm exec "$TAG-fleet1" python /opt/cockpit/healthcheck.py 2>&1) || fail "the HEALTHCHECK failed on a live fleet: $health"
    # podman 4.3 says nothing on success, and the timer's systemd complaint on stderr; the verdict
    # is its exit code and the container's health status.
    pm healthcheck run "$TAG-fleet1" >/dev/null 2>&1 || fail "podman healthcheck run: unhealthy (exit $?)"
    verdict=$(pm inspect --format '{{.State.Health.Status}}' "$TAG-fleet1")
    [ "$verdict" = healthy ] || fail "podman healthcheck run: the container's health is $verdict"
    log "HEALTHCHECK on the live fleet: $health; podman healthcheck run: $verdict"
    pm kill -s KILL "$TAG-fleet1" >/dev/null
    killed=$(date +%s.%N)
    break
  fi
  sleep 0.3
done
[ -n "$killed" ] || fail "no agent checkpointed in tier 2 within 6 minutes"
rc=$(wait_exit "$TAG-fleet1")
log "killed with SIGKILL (container exit $rc); each agent then:"
"$PYTHON" - "$RUNS/pod" "$killed" before >"$WORK/before.txt" <<'PY'
import json, pathlib, sys
run, killed = pathlib.Path(sys.argv[1]), float(sys.argv[2])
for events in sorted(run.glob("jobs/*/events.jsonl")):
    steps = ckpt = 0
    state = "running"
    for line in events.read_text().splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue
        steps = max(steps, e.get("num_timesteps") or e.get("steps") or 0)
        if e["kind"] == "checkpoint":
            ckpt = max(ckpt, e["step"])
        if e["kind"] == "finished":
            state = f"finished ({e['status']})"
        if e["kind"] == "started":
            state = "running"
    print(f"{events.parent.name} steps {steps} last checkpoint {ckpt} {state}")
PY
sed 's/^/[container]   before the kill: /' "$WORK/before.txt"
[ -z "$(pm ps -q --filter "name=$TAG-fleet1")" ] || fail "the killed container is still running"
[ ! -e "$RUNS/on-done-pod.txt" ] || fail "--on-done ran after a SIGKILL: $(cat "$RUNS/on-done-pod.txt")"

t_restart=$(date +%s.%N)
start "$TAG-fleet2" "${fleet_args[@]}"
rc=$(wait_exit "$TAG-fleet2")
pm logs "$TAG-fleet2" 2>&1 | tail -5 | sed 's/^/[container]   | /'
[ "$rc" = 0 ] || fail "the restarted fleet's container exited $rc"
"$PYTHON" - "$RUNS/pod" "$t_restart" <<'PY' | sed 's/^/[container]   after the restart: /'
import json, pathlib, sys
run, t = pathlib.Path(sys.argv[1]), float(sys.argv[2])
for events in sorted(run.glob("jobs/*/events.jsonl")):
    resumed = "not started again"
    for line in events.read_text().splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if e["kind"] == "started" and e["t"] > t and resumed == "not started again":
            resumed = f"started again from step {e.get('resumed_from_step')}"
        if e["kind"] == "finished" and e["t"] > t:
            resumed += f", finished {e['status']} at {e['steps']}"
    print(f"{events.parent.name} {resumed}")
PY
report /runs/pod >"$WORK/fleet-report.txt" || {
  tail -5 "$WORK/fleet-report.txt" >&2
  fail "cockpit report /runs/pod failed"
}
grep -q "models: 2 collected, checksums verified" "$WORK/fleet-report.txt" ||
  fail "the report does not verify 2 models: $(grep -i models "$WORK/fleet-report.txt")"
[ "$(cat "$RUNS/on-done-pod.txt")" = "done pod" ] ||
  fail "--on-done: expected one 'done pod' line, got: $(cat "$RUNS/on-done-pod.txt" 2>&1)"
log "fleet resumed and finished: $(grep "models:" "$WORK/fleet-report.txt"); --on-done ran once: $(cat "$RUNS/on-done-pod.txt")"
log "owner of the files on /runs: $(stat -c '%u:%g' "$RUNS/pod/fleet.db") (the image's user is $uid:$gid)"
log "summary: base ${base_build_s} s $((base_size / 1048576)) MiB; image ${image_build_s} s $((image_size / 1048576)) MiB"
log "PASS"
