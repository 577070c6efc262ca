# Shared by scripts/demo.sh and scripts/test.sh: installs what is missing, then configures and
# builds incrementally. Sourced, not run.
# LibTorch's version and where it goes: scripts/install-libtorch.sh (Note [Dependency cache]).

set -euo pipefail

SYMTUNE_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$SYMTUNE_ROOT/scripts/install-libtorch.sh"
SYMTUNE_TORCH_HOME=$SYMTUNE_CACHE/$SYMTUNE_TORCH_FOLDER
SYMTUNE_PRESET=${SYMTUNE_PRESET:-ci}
SYMTUNE_BUILD_DIR=$SYMTUNE_ROOT/build/$SYMTUNE_PRESET

# Everything the studio, the tests and the packages need on a bare Debian 12. Installed without
# Recommends, so a CMake package that another one needs is named here itself: Qt Charts' config
# loads Qt OpenGL's, which is in libqt6opengl6-dev (a Recommends of qt6-base-dev).
# The packaging test (tests/install) checks the .deb with dpkg-dev's tools and the desktop files
# with desktop-file-utils, appstream and shared-mime-info.
APT_PACKAGES=(build-essential cmake ninja-build ccache pkg-config git python3 python3-pip
  qt6-base-dev qt6-charts-dev qt6-svg-dev libqt6opengl6-dev libgl-dev libgraphviz-dev
  nlohmann-json3-dev libasio-dev doctest-dev zlib1g-dev libpng-dev libjpeg-dev dpkg-dev desktop-file-utils appstream
  shared-mime-info)

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
  install_libtorch "$SYMTUNE_TORCH_HOME" || exit 1
}

ensure_deps() {
  ensure_apt_packages
  ensure_torch
}

# In a subshell: the caller's working directory stays its own, so relative paths given to
# demo.sh and screenshot.sh mean what they say.
build() (
  cd "$SYMTUNE_ROOT"
  # Configure anew when the presets changed since the last configure, so a build folder made
  # under older presets (or with an option since made mandatory) cannot carry on quietly.
  if [ ! -f "$SYMTUNE_BUILD_DIR/build.ninja" ] ||
    [ CMakePresets.json -nt "$SYMTUNE_BUILD_DIR/CMakeCache.txt" ]; then
    log "configuring (preset $SYMTUNE_PRESET)"
    cmake --preset "$SYMTUNE_PRESET" -DSYMTUNE_TORCH_HOME="$SYMTUNE_TORCH_HOME" >&2
  fi
  cmake --build "$SYMTUNE_BUILD_DIR" "$@" >&2
)
