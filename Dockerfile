# cockpit for a rented GPU (RunPod, Lambda, any host with the NVIDIA container toolkit): docs/cloud.md.
#
#   docker build -t cockpit .
#   docker run --gpus all --ipc=host --pid=host -v cockpit-runs:/runs cockpit fleet PLAN.toml
#
# BASE: nvidia/cuda 13.0.1 on Ubuntu 24.04. torch 2.13.0's Linux wheel on PyPI is a CUDA 13.0 build
# (it requires cuda-toolkit==13.0.3 and nvidia-cudnn-cu13 from PyPI: the CUDA libraries come with
# torch, so the slim `base` flavour of the image suffices and the `runtime`/`cudnn-runtime` ones would
# only add a second copy of cuBLAS and cuDNN, a few GB). What the nvidia/cuda image still gives:
# NVIDIA_REQUIRE_CUDA=cuda>=13.0, so the container toolkit refuses a host whose driver is too old
# (CUDA 13 needs driver >= 580) at `docker run` instead of torch failing later, and
# NVIDIA_VISIBLE_DEVICES=all, which the toolkit reads (set by the base, not here: on a base without
# it, a container on a host without GPUs does not claim to have been given one). Ubuntu 24.04
# because its python3 is 3.12: envpool 1.2.5 ships wheels for CPython 3.11 to 3.14 only, so 22.04's
# Python 3.10 cannot install it. The tag could not be pulled from the machine this was written on
# (no registry reachable): check it with `docker pull` before relying on it.
# Any Debian/Ubuntu base with python3 >= 3.11 works (the container check builds on Debian bookworm:
# benchmarks/container/check.sh).
ARG BASE=nvidia/cuda:13.0.1-base-ubuntu24.04
FROM ${BASE}

# The torch build. Empty TORCH_INDEX: PyPI's torch==2.13.0, the CUDA 13.0 build. A pip index URL
# takes torch from it instead, e.g. https://download.pytorch.org/whl/cpu for the CPU build (the
# container check uses a local index holding the CPU wheel).
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX=
# Where pip looks, for a build without PyPI (a mirror, a wheel directory bind-mounted into the build),
# and PIP_CERT, a CA bundle for a proxy that re-signs TLS (the container check has one); empty:
# pip's defaults.
ARG PIP_INDEX_URL=
ARG PIP_EXTRA_INDEX_URL=
ARG PIP_FIND_LINKS=
ARG PIP_CERT=
# The user the cockpit runs as. 1000 is the first user on most hosts, so files it writes to a
# bind-mounted /runs belong to the host's usual user.
ARG UID=1000
ARG GID=1000

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

# torch in a layer of its own: the largest (882 MB for the CPU build; several GB more for the CUDA
# one's libraries, not measured here), and it changes least.
RUN for v in PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_FIND_LINKS PIP_CERT; do \
        eval "[ -n \"\${$v}\" ] || unset $v"; \
    done \
    && pip install ${TORCH_INDEX:+--index-url "$TORCH_INDEX"} "torch==${TORCH_VERSION}"

# cockpit itself (not editable) with its TensorBoard logs and `cockpit export mlflow`. Only what the
# package is built from is copied, so a change to docs or tests does not rebuild this layer.
COPY pyproject.toml README.md /tmp/cockpit-src/
COPY cockpit /tmp/cockpit-src/cockpit
COPY training /tmp/cockpit-src/training
COPY presets /tmp/cockpit-src/presets
RUN for v in PIP_INDEX_URL PIP_EXTRA_INDEX_URL PIP_FIND_LINKS PIP_CERT; do \
        eval "[ -n \"\${$v}\" ] || unset $v"; \
    done \
    && pip install "/tmp/cockpit-src[tensorboard,mlflow]" \
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

# cockpit-pod (docs/cloud.md) starts the run on /runs, or resumes it after the pod restarted; it
# execs cockpit, which stays tini's child: SIGTERM from `docker stop` reaches it and the jobs
# checkpoint. `docker run IMAGE fleet /runs/plan.toml` or `docker run IMAGE run --preset heavy`;
# without a command it prints its usage. Other commands: `docker exec CTR cockpit ...`, or
# `--entrypoint cockpit`.
ENTRYPOINT ["tini", "--", "cockpit-pod"]
