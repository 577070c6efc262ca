#!/usr/bin/env bash
# Symtune as a user installs it: cpack makes the .deb and the .tar.gz; the .deb, unpacked with
# dpkg-deb -x (no build tree in its paths), runs `symtune --version`, trains the bundled demo
# session with `symtune --batch` through the installed runner, refuses clearly without LibTorch,
# starts the demo in the studio (offscreen) and saves its window; a user program is built out of
# tree against it with find_package(Symtune), serves the attach protocol and is attached to; the
# desktop entry, AppStream metainfo, MIME type and icons are valid.
#   install_test.sh BUILD_DIR WORK_DIR ATTACH_PROBE VERSION
# SYMTUNE_TORCH_HOME names the LibTorch the installed runner and the user program use.
set -euo pipefail
build=$1 work=$2 probe=$3 version=$4
rm -rf "$work"
mkdir -p "$work"
step() { printf '== %s\n' "$*"; }
fail() { printf 'FAIL: %s\n' "$*" >&2; exit 1; }
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT

# wait_for FILE PATTERN SECONDS: until FILE has a line matching PATTERN.
wait_for() {
  local i
  for ((i = 0; i < $3 * 10; i++)); do
    grep -q "$2" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  return 1
}

step "cpack: the .deb and the .tar.gz"
(cd "$work" && cpack --config "$build/CPackConfig.cmake" -B "$work/packages") > "$work/cpack.log" 2>&1 ||
  { cat "$work/cpack.log"; fail "cpack failed"; }
deb=$(ls "$work"/packages/symtune_"$version"_*.deb)
tgz=$(ls "$work"/packages/symtune-"$version"-Linux-*.tar.gz)
ls -l "$deb" "$tgz"
depends=$(dpkg-deb -f "$deb" Depends)
echo "Depends: $depends"
for package in libqt6widgets6 libqt6charts6 libqt6svg6 libgvc6 libcgraph6 qt6-qpa-plugins \
               nlohmann-json3-dev libc6 libstdc++6; do
  [[ $depends == *"$package"* ]] || fail "the .deb does not depend on $package"
done
tar -tzf "$tgz" > "$work/tgz.list"
for file in bin/symtune bin/symtune-runner libexec/symtune/symtune-runner \
            lib/cmake/Symtune/SymtuneConfig.cmake share/symtune/sessions/demo.json; do
  grep -q "/$file\$" "$work/tgz.list" || fail "the .tar.gz lacks $file"
done
dpkg-deb -x "$deb" "$work/root"
prefix=$work/root/usr

step "symtune --version"
"$prefix/bin/symtune" --version | tee "$work/version.txt"
grep -qx "symtune $version (studio)" "$work/version.txt" || fail "unexpected --version"

step "desktop entry, AppStream metainfo, MIME type, icons"
desktop-file-validate "$prefix/share/applications/org.symtune.Symtune.desktop"
appstreamcli validate --no-net "$prefix/share/metainfo/org.symtune.Symtune.metainfo.xml"
mkdir -p "$work/mime/packages"
cp "$prefix/share/mime/packages/org.symtune.Symtune.xml" "$work/mime/packages/"
update-mime-database "$work/mime"
[ -f "$work/mime/application/x-symtune-session+json.xml" ] || fail "the MIME type did not register"
for size in 16 24 32 48 64 128 256; do
  png=$prefix/share/icons/hicolor/${size}x${size}/apps/org.symtune.Symtune.png
  [ "$(head -c 4 "$png" | tail -c 3)" = PNG ] || fail "no PNG icon at $size px"
done
[ -f "$prefix/share/icons/hicolor/scalable/apps/org.symtune.Symtune.svg" ] || fail "no SVG icon"

step "symtune --batch on the bundled demo session, through the installed runner"
(cd "$work" && "$prefix/bin/symtune" --batch "$prefix/share/symtune/sessions/demo.json" \
  --report "$work/demo-report.json" --progress-interval 100)
python3 - "$work/demo-report.json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
assert report["status"] == "completed", report["status"]
steps = report["steps"]["completed"]
print(f"report: {report['status']}, {steps} steps")
assert steps == 200, steps
PY

step "without LibTorch the installed runner says what to do"
set +e
env -i PATH=/usr/bin:/bin HOME="$work/nohome" SYMTUNE_TORCH_HOME="$work/nowhere" \
  "$prefix/bin/symtune" --batch "$prefix/share/symtune/sessions/demo.json" 2> "$work/notorch.txt"
status=$?
set -e
cat "$work/notorch.txt"
[ $status -eq 2 ] || fail "expected exit status 2 without LibTorch, got $status"
grep -q "symtune-install-libtorch" "$work/notorch.txt" || fail "the message does not say how"

step "a user program built out of tree with find_package(Symtune), attached to"
launcher=()
command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$prefix/share/symtune/examples/attachable_mlp" -B "$work/mlp" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" "${launcher[@]}" > "$work/mlp-configure.log" 2>&1 ||
  { cat "$work/mlp-configure.log"; fail "configuring the example against the install failed"; }
cmake --build "$work/mlp" || fail "building the example against the install failed"
program=$work/mlp/symtune-example-attachable
ldd "$program" | grep libsymtune_engine | tee "$work/ldd.txt"
grep -q "$prefix/lib/libsymtune_engine.so" "$work/ldd.txt" || fail "not linked to the installed engine"
"$program" "unix:$work/mlp.sock" 100000 > "$work/mlp.log" 2>&1 &
pids+=($!)
wait_for "$work/mlp.log" "listening on" 60 || { cat "$work/mlp.log"; fail "the program did not listen"; }
"$probe" "unix:$work/mlp.sock" > "$work/probe.log" 2>&1 &
pids+=($!)
wait_for "$work/probe.log" "^step [0-9]" 60 || { cat "$work/probe.log"; fail "no step reached the client"; }
head -3 "$work/probe.log"

step "the example rule plugin built out of tree, and loaded from a user's plugin folder"
cmake -S "$prefix/share/symtune/examples/plugins/gradient_centralization" -B "$work/plugin" -G Ninja \
  -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" "${launcher[@]}" > "$work/plugin-configure.log" 2>&1 ||
  { cat "$work/plugin-configure.log"; fail "configuring the plugin against the install failed"; }
cmake --build "$work/plugin" || fail "building the plugin against the install failed"
mkdir -p "$work/data/symtune/plugins"
chmod 755 "$work/data" "$work/data/symtune" "$work/data/symtune/plugins"
cp "$work/plugin/libsymtune_gradient_centralization.so" "$work/data/symtune/plugins/"
# The user's folder is searched first: its copy registers, the install's same-named one is refused.
XDG_DATA_HOME="$work/data" "$prefix/bin/symtune" rules list > "$work/rules.json" 2> "$work/rules.err"
cat "$work/rules.err"
grep -q "\"origin\": \"plugin gradient_centralization 1.0.0 ($work/data/symtune/plugins/" "$work/rules.json" ||
  fail "the plugin built against the install was not loaded"

step "the studio, offscreen: starts the demo session with the installed runner and shows it"
QT_QPA_PLATFORM=offscreen XDG_CONFIG_HOME="$work/config" XDG_DATA_HOME="$work/data" \
  timeout 300 "$prefix/bin/symtune" --run "$prefix/share/symtune/sessions/demo.json" \
  --screenshot "$work/studio.png" --screenshot-after 5
[ "$(head -c 4 "$work/studio.png" | tail -c 3)" = PNG ] || fail "the studio saved no window"

printf 'the installed Symtune works: .deb %s KiB, .tar.gz %s KiB\n' \
  "$(($(stat -c %s "$deb") / 1024))" "$(($(stat -c %s "$tgz") / 1024))"
