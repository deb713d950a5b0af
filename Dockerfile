# cockpit for a rented GPU (RunPod, Lambda, any host with the NVIDIA container toolkit): docs/cloud.md.
#
#   docker build -t cockpit .
#   docker run --gpus all --shm-size=8g -v cockpit-runs:/runs cockpit fleet PLAN.toml
#
# BASE: nvidia/cuda 13.0.1 on Ubuntu 24.04, pinned by digest so that two builds start from the same
# bytes (a tag can be moved). torch 2.13.0's Linux wheel on PyPI is a CUDA 13.0 build (it requires
# cuda-toolkit==13.0.3 and nvidia-cudnn-cu13 from PyPI: the CUDA libraries come with torch, so the
# slim `base` flavour of the image suffices and the `runtime`/`cudnn-runtime` ones would only add a
# second copy of cuBLAS and cuDNN, a few GB). What the nvidia/cuda image still gives:
# NVIDIA_REQUIRE_CUDA=cuda>=13.0, so the container toolkit refuses a host whose driver is too old
# (CUDA 13 needs driver >= 580) at `docker run` instead of torch failing later, and
# NVIDIA_VISIBLE_DEVICES=all, which the toolkit reads (set by the base, not here: on a base without
# it, a container on a host without GPUs does not claim to have been given one). Ubuntu 24.04
# because its python3 is 3.12: envpool 1.2.5 ships wheels for CPython 3.11 to 3.14 only, so 22.04's
# Python 3.10 cannot install it. The digest is the one public Dockerfiles pin this tag to; no
# registry is reachable from the machine this was written on, so check it before relying on it,
# and to move to a newer base pin the new tag's digest the same way:
#   docker buildx imagetools inspect nvidia/cuda:13.0.1-base-ubuntu24.04   # "Digest: sha256:..."
#   skopeo inspect --format '{{.Digest}}' docker://nvidia/cuda:13.0.1-base-ubuntu24.04
# Any Debian/Ubuntu base with python3 >= 3.11 works, by digest from a registry or by name when built
# locally (the container check imports a Debian bookworm base it builds with mmdebstrap:
# benchmarks/container/check.sh).
ARG BASE=docker.io/nvidia/cuda:13.0.1-base-ubuntu24.04@sha256:f8ef28f579ea42a44b415d2c5d46f788e6a9b395c6c83f2929416e1fc192c143
FROM ${BASE}

# The torch build. Empty TORCH_INDEX: PyPI's torch==2.13.0, the CUDA 13.0 build. A pip index URL
# takes torch from it instead, e.g. https://download.pytorch.org/whl/cpu for the CPU build (the
# container check uses a local index holding the CPU wheel).
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX=
# Where pip looks, for a build without PyPI: PIP_FIND_LINKS, a wheel directory bind-mounted into the
# build, and PIP_CERT, a CA bundle for a proxy that re-signs TLS (the container check has one);
# empty: pip's defaults. An index URL is not a build argument, since build arguments are kept in the
# image's history (`docker history`) and an index URL often carries a password: it is a build secret,
# read from /run/secrets in the RUN steps that use it and kept nowhere in the image:
#   docker build --secret id=pip_index_url,src=FILE [--secret id=pip_extra_index_url,src=FILE] .
ARG PIP_FIND_LINKS=
ARG PIP_CERT=
# The user the cockpit runs as: 10001, a UID no host gives its first users (1000 and up), so the
# container's user is nobody on the host, should anything of the host's be shared with it.
ARG UID=10001
ARG GID=10001

ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    PATH=/opt/cockpit/bin:$PATH

# python3 and venv for the cockpit's own environment (Ubuntu 24.04's python is externally managed,
# PEP 668); tini as PID 1: it reaps the zombies of the workers' children and forwards SIGTERM/SIGINT
# to the cockpit, which then checkpoints every job before the container stops. Skipped when the base
# already has them (the check's Debian base is built with them).
RUN if ! command -v tini >/dev/null || ! python3 -c 'import ensurepip, venv' 2>/dev/null; then \
        apt-get update \
        && apt-get install -y --no-install-recommends python3 python3-venv tini ca-certificates \
        && rm -rf /var/lib/apt/lists/*; \
    fi \
    && python3 -c 'import sys; assert sys.version_info >= (3, 10), sys.version' \
    && python3 -m venv /opt/cockpit
COPY container/pip-env.sh /opt/cockpit/pip-env
COPY container/requirements.txt /tmp/cockpit-requirements.txt

# torch in a layer of its own: the largest (882 MB for the CPU build; several GB more for the CUDA
# one's libraries, not measured here), and it changes least. By version from TORCH_INDEX, not by
# hash: which build (CPU, CUDA) is that index's choice; what it needs at the lock's versions.
RUN --mount=type=secret,id=pip_index_url --mount=type=secret,id=pip_extra_index_url \
    . /opt/cockpit/pip-env \
    && sed -n 's/^\([A-Za-z0-9._-]*==[^ ]*\).*/\1/p' /tmp/cockpit-requirements.txt >/tmp/versions.txt \
    && pip install -c /tmp/versions.txt ${TORCH_INDEX:+--index-url "$TORCH_INDEX"} "torch==${TORCH_VERSION}" \
    && rm /tmp/versions.txt

# cockpit's dependencies, with its TensorBoard logs and `cockpit export mlflow`, exactly as locked:
# every wheel by its SHA-256 (container/requirements.txt, written by benchmarks/container/lock.py),
# so two builds install the same files and a tampered index cannot swap one. Then cockpit itself
# (not editable), built with the locked setuptools and nothing more fetched (--no-deps,
# --no-build-isolation), and `pip check` that the whole set fits. Only what the package is built
# from is copied, so a change to docs or tests does not rebuild this layer.
RUN --mount=type=secret,id=pip_index_url --mount=type=secret,id=pip_extra_index_url \
    . /opt/cockpit/pip-env \
    && pip install --require-hashes --only-binary=:all: -r /tmp/cockpit-requirements.txt \
    && rm /tmp/cockpit-requirements.txt
COPY pyproject.toml README.md /tmp/cockpit-src/
COPY cockpit /tmp/cockpit-src/cockpit
COPY training /tmp/cockpit-src/training
COPY presets /tmp/cockpit-src/presets
COPY container/healthcheck.py /opt/cockpit/healthcheck.py
RUN . /opt/cockpit/pip-env \
    && pip install --no-deps --no-build-isolation --no-index "/tmp/cockpit-src" \
    && pip check \
    && rm -rf /tmp/cockpit-src \
    && python -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' \
    && cockpit --help >/dev/null

# A non-root user owns /runs. A named volume mounted there starts with this ownership; a host
# directory bind-mounted there must be writable by UID (docs/cloud.md). An existing user with that
# UID (Ubuntu 24.04 images have `ubuntu`, 1000) is replaced.
RUN old=$(getent passwd "${UID}" | cut -d: -f1); if [ -n "$old" ]; then userdel -r "$old" 2>/dev/null || userdel "$old"; fi \
    && old=$(getent group "${GID}" | cut -d: -f1); if [ -n "$old" ]; then groupdel "$old"; fi \
    && groupadd --gid "${GID}" cockpit \
    && useradd --uid "${UID}" --gid "${GID}" --create-home --shell /bin/bash cockpit \
    && mkdir -p /runs && chown cockpit:cockpit /runs
USER cockpit
VOLUME /runs
WORKDIR /runs
# The probe's measured costs (and MPS's) live on the volume, so a restarted pod does not measure
# again what it measured before: ~/.cache is inside the container and goes with it.
ENV XDG_CACHE_HOME=/runs/.cache

# Healthy while the newest run on /runs answers a hello on its control socket (the socket a viewer
# attaches to): a cockpit that hangs, or a run that ended, is unhealthy. The start period covers the
# worker imports before the socket is up. podman keeps it only in the docker image format
# (`podman build --format docker`).
HEALTHCHECK --interval=60s --timeout=10s --start-period=120s --retries=3 \
    CMD ["python", "/opt/cockpit/healthcheck.py"]

# cockpit-pod (docs/cloud.md) starts the run on /runs, or resumes it after the pod restarted; it
# execs cockpit, which stays tini's child: SIGTERM from `docker stop` reaches it and the jobs
# checkpoint. `docker run IMAGE fleet /runs/plan.toml` or `docker run IMAGE run --preset heavy`;
# without a command it prints its usage. Other commands: `docker exec CTR cockpit ...`, or
# `--entrypoint cockpit`.
ENTRYPOINT ["tini", "--", "cockpit-pod"]
