# Shared by scripts/demo.sh and scripts/test.sh: installs what is missing, then configures and
# builds incrementally. Sourced, not run.
#
# Note [Dependency cache]
# LibTorch comes from the PyTorch 2.11.0 wheel on PyPI (the CUDA 13.0 build, the same as the GPU
# machine's). It is installed once per machine into a cache outside the checkout, keyed by version,
# so every clone (CI's included) reuses it. The wheel's libraries also need cuSPARSELt, NVSHMEM and
# cuFile, which the CUDA toolkit in /usr/local/cuda does not ship; their wheels go into the same
# folder, where torch's own RPATH ($ORIGIN/../../nvidia/...) finds them. Everything else CUDA (cudart,
# cuBLAS, cuDNN, NCCL, CUPTI) comes from the toolkit, so one CUDA version is loaded per process.

set -euo pipefail

SYMTUNE_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SYMTUNE_TORCH_VERSION=2.11.0
SYMTUNE_CACHE=${SYMTUNE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/symtune}
SYMTUNE_TORCH_HOME=$SYMTUNE_CACHE/libtorch-$SYMTUNE_TORCH_VERSION-cu130
SYMTUNE_PRESET=${SYMTUNE_PRESET:-ci}
SYMTUNE_BUILD_DIR=$SYMTUNE_ROOT/build/$SYMTUNE_PRESET

# Everything the studio, the tests and the packages need on a bare Debian 12. Installed without
# Recommends, so a CMake package that another one needs is named here itself: Qt Charts' config
# loads Qt OpenGL's, which is in libqt6opengl6-dev (a Recommends of qt6-base-dev).
APT_PACKAGES=(build-essential cmake ninja-build ccache pkg-config git python3 python3-pip
  qt6-base-dev qt6-charts-dev qt6-svg-dev libqt6opengl6-dev libgl-dev libgraphviz-dev
  nlohmann-json3-dev libasio-dev)
PIP_PACKAGES=("torch==$SYMTUNE_TORCH_VERSION" "nvidia-cusparselt-cu13==0.8.0"
  "nvidia-nvshmem-cu13==3.4.5" "nvidia-cufile==1.15.1.6"
  # torch's pure-Python dependencies, for the tests that script models in Python
  "typing-extensions==4.15.0" "sympy==1.14.0" "mpmath==1.3.0" "networkx==3.5" "jinja2==3.1.6"
  "markupsafe==3.0.3" "fsspec==2025.9.0" "filelock==3.19.1")

log() { printf '[symtune] %s\n' "$*" >&2; }

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else log "need root to run: $*"; exit 1; fi
}

ensure_apt_packages() {
  local missing=() p
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing Debian packages: ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

ensure_torch() {
  # The marker holds the package list, so a changed list installs again.
  if [ -f "$SYMTUNE_TORCH_HOME/.complete" ] &&
    [ "$(cat "$SYMTUNE_TORCH_HOME/.complete")" = "${PIP_PACKAGES[*]}" ]; then
    return 0
  fi
  log "installing LibTorch $SYMTUNE_TORCH_VERSION (PyPI wheel) into $SYMTUNE_TORCH_HOME"
  mkdir -p "$SYMTUNE_CACHE"
  local staging
  staging=$(mktemp -d "$SYMTUNE_CACHE/.staging.XXXXXX")
  # --no-deps: the wheel's Python dependencies are not needed by C++ users, and its CUDA libraries
  # come from the toolkit except the three listed in PIP_PACKAGES (Note [Dependency cache]).
  if ! python3 -m pip install --quiet --disable-pip-version-check --no-deps \
      --target "$staging/site" "${PIP_PACKAGES[@]}"; then
    rm -rf "$staging"
    log "pip could not install ${PIP_PACKAGES[*]}"
    exit 1
  fi
  rm -rf "$SYMTUNE_TORCH_HOME"
  mv "$staging" "$SYMTUNE_TORCH_HOME"
  printf '%s' "${PIP_PACKAGES[*]}" > "$SYMTUNE_TORCH_HOME/.complete"
}

ensure_deps() {
  ensure_apt_packages
  command -v python3 >/dev/null && python3 -m pip --version >/dev/null 2>&1 || {
    log "python3 -m pip is missing"; exit 1; }
  ensure_torch
}

build() {
  cd "$SYMTUNE_ROOT"
  # Configure anew when the presets changed since the last configure, so a build folder made
  # under older presets (or with an option since made mandatory) cannot carry on quietly.
  if [ ! -f "$SYMTUNE_BUILD_DIR/build.ninja" ] ||
    [ CMakePresets.json -nt "$SYMTUNE_BUILD_DIR/CMakeCache.txt" ]; then
    log "configuring (preset $SYMTUNE_PRESET)"
    cmake --preset "$SYMTUNE_PRESET" -DSYMTUNE_TORCH_HOME="$SYMTUNE_TORCH_HOME" >&2
  fi
  cmake --build "$SYMTUNE_BUILD_DIR" "$@" >&2
}
