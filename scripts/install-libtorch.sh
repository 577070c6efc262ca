#!/usr/bin/env bash
# Installs LibTorch 2.11.0 (the PyTorch wheel from PyPI) into a folder, once: a second run with the
# same package list does nothing. scripts/common.sh sources this file; an installed Symtune ships it
# as `symtune-install-libtorch` (docs/installing.md, "LibTorch").
#   install-libtorch.sh [--system | DIR]
#     DIR       default: ~/.cache/symtune/libtorch-2.11.0-cu130 (or under $SYMTUNE_CACHE)
#     --system  /usr/local/lib/symtune/libtorch-2.11.0-cu130, for every user of the machine
#
# Note [Dependency cache]
# LibTorch comes from the PyTorch 2.11.0 wheel on PyPI (the CUDA 13.0 build, the same as the GPU
# machine's). It is installed once per machine into a cache outside the checkout, keyed by version,
# so every clone (CI's included) and an installed Symtune reuse it. The wheel's libraries also need
# cuSPARSELt, NVSHMEM and cuFile, which the CUDA toolkit in /usr/local/cuda does not ship; their
# wheels go into the same folder, where torch's own RPATH ($ORIGIN/../../nvidia/...) finds them.
# Everything else CUDA (cudart, cuBLAS, cuDNN, NCCL, CUPTI) comes from the toolkit, so one CUDA
# version is loaded per process.

SYMTUNE_TORCH_VERSION=2.11.0
SYMTUNE_TORCH_FOLDER=libtorch-$SYMTUNE_TORCH_VERSION-cu130
SYMTUNE_CACHE=${SYMTUNE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/symtune}
SYMTUNE_TORCH_SYSTEM_HOME=/usr/local/lib/symtune/$SYMTUNE_TORCH_FOLDER
PIP_PACKAGES=("torch==$SYMTUNE_TORCH_VERSION" "nvidia-cusparselt-cu13==0.8.0"
  "nvidia-nvshmem-cu13==3.4.5" "nvidia-cufile==1.15.1.6"
  # torch's pure-Python dependencies, for the tests that script models in Python
  "typing-extensions==4.15.0" "sympy==1.14.0" "mpmath==1.3.0" "networkx==3.5" "jinja2==3.1.6"
  "markupsafe==3.0.3" "fsspec==2025.9.0" "filelock==3.19.1")

# libtorch_installed DIR: whether DIR holds PIP_PACKAGES for this python3. The marker holds the
# package list, so a changed list installs again; the wheel's Python extension is built for one
# Python (cp311 on Debian 12), so a python3 of another version (a venv, an upgraded Debian)
# installs again too, where the tests that import torch would fail on torch._C.
libtorch_installed() {
  local home=$1 tag
  [ -f "$home/.complete" ] && [ "$(cat "$home/.complete")" = "${PIP_PACKAGES[*]}" ] || return 1
  tag=$(python3 -c 'import sys; print(sys.implementation.cache_tag)' 2>/dev/null) || return 1
  compgen -G "$home/site/torch/_C.$tag-*.so" >/dev/null
}

# libtorch_is_cuda13 SITE: whether pip put the CUDA 13.0 build of torch into SITE. A pip
# configuration naming another index (PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu)
# gives torch 2.11.0+cpu for torch==2.11.0, with which CUDA would quietly build OFF.
libtorch_is_cuda13() {
  grep -Eq "^cuda(: Optional\[str\])? = '13\.0'" "$1/torch/version.py" 2>/dev/null
}

# install_libtorch DIR: installs PIP_PACKAGES into DIR/site unless it holds them already.
install_libtorch() {
  local home=$1 staging parent
  libtorch_installed "$home" && return 0
  python3 -m pip --version >/dev/null 2>&1 || {
    printf '[symtune] python3 -m pip is missing (Debian: python3-pip)\n' >&2; return 1; }
  parent=$(dirname "$home")
  mkdir -p "$parent" || {
    printf '[symtune] cannot make %s for LibTorch\n' "$parent" >&2; return 1; }
  # One install at a time into a cache (two CI clones on a fresh machine): the second waits for
  # the first and then finds its install. Under the lock, what an interrupted install left (a
  # staging folder of up to 1.5 GB) is nobody's and goes.
  local lock
  exec {lock}>"$parent/.install.lock" && flock "$lock" || {
    printf '[symtune] cannot lock %s/.install.lock\n' "$parent" >&2; return 1; }
  if libtorch_installed "$home"; then
    exec {lock}>&-
    return 0
  fi
  rm -rf "$parent"/.staging.*
  printf '[symtune] installing LibTorch %s (PyPI wheel) into %s\n' "$SYMTUNE_TORCH_VERSION" "$home" >&2
  # Checked here: callers run this under `|| exit 1`, which turns set -e off inside it, and an
  # empty $staging would send pip to /site.
  staging=$(mktemp -d "$parent/.staging.XXXXXX") && [ -n "$staging" ] || {
    exec {lock}>&-
    printf '[symtune] cannot make a folder under %s for LibTorch\n' "$parent" >&2; return 1; }
  # --no-deps: the wheel's Python dependencies are not needed by C++ users, and its CUDA libraries
  # come from the toolkit except the three listed in PIP_PACKAGES (Note [Dependency cache]).
  if ! python3 -m pip install --quiet --disable-pip-version-check --no-deps \
      --target "$staging/site" "${PIP_PACKAGES[@]}"; then
    rm -rf "$staging"
    exec {lock}>&-
    printf '[symtune] pip could not install %s\n' "${PIP_PACKAGES[*]}" >&2
    return 1
  fi
  if ! libtorch_is_cuda13 "$staging/site"; then
    printf '[symtune] pip installed torch %s, not the CUDA 13.0 build: a pip configuration\n' \
      "$(sed -n "s/^__version__ = '\(.*\)'/\1/p" "$staging/site/torch/version.py" 2>/dev/null)" >&2
    printf '[symtune] (PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, pip.conf) names another index than PyPI\n' >&2
    rm -rf "$staging"
    exec {lock}>&-
    return 1
  fi
  rm -rf "$home" && mv "$staging" "$home" && chmod 755 "$home" &&
    printf '%s' "${PIP_PACKAGES[*]}" > "$home/.complete" || {
    exec {lock}>&-
    printf '[symtune] cannot move LibTorch into %s\n' "$home" >&2; return 1; }
  exec {lock}>&-
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  case "${1:-}" in
    -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --system) home=$SYMTUNE_TORCH_SYSTEM_HOME ;;
    "") home=$SYMTUNE_CACHE/$SYMTUNE_TORCH_FOLDER ;;
    -*) printf 'install-libtorch: unknown option %s (see --help)\n' "$1" >&2; exit 2 ;;
    *) home=$1 ;;
  esac
  install_libtorch "$home"
  printf '%s\n' "$home"
fi
