#!/usr/bin/env bash
# Installs the system libraries Qt's X11 (xcb) platform plugin needs for Draftwise's tray app, and the C++ compiler
# and Python venv support that README's set-up needs to build llama.cpp in a virtual environment, when any is
# missing: apt-get on Debian/Ubuntu, dnf on Fedora (with sudo unless run as root). The list of libraries and
# their package names is tuner/app.py XCB_LIBRARIES, the one `draftwise` checks before it loads Qt; this script
# asks it (from this checkout, before anything is installed) which are missing here. Safe to run again: with
# nothing missing it changes nothing and needs no sudo. Elsewhere it names what is missing and exits 0 (the
# command-line part of Draftwise works without them).
set -euo pipefail

if [ "$(uname -s)" != Linux ]; then
  echo "install-system-libs: nothing to do on $(uname -s) (Qt's X11 libraries are a Linux matter)"
  exit 0
fi
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
py=${PYTHON:-$(command -v python3 || command -v python || true)}
if [ -z "$py" ]; then
  echo "install-system-libs: no python3 found; Draftwise needs Python 3.10 or later first" >&2
  exit 1
fi

plan() {  # prints "<apt|dnf|?> <package or soname>..." for what is missing, or nothing
  # Qt's X11 libraries (tuner.app, the list `draftwise` checks), then what the build of llama.cpp and the
  # README's virtual environment need: a C++ compiler and Python's venv/ensurepip (Debian splits them out)
  "$py" -c 'import importlib.util, shutil, sys; sys.path.insert(0, sys.argv[1])
from tuner.app import package_manager, read_os_release, xcb_install_plan
m, names = xcb_install_plan()
known = package_manager(read_os_release())
tools = {"apt": ["g++", "python3-venv"], "dnf": ["gcc-c++", "python3"]}.get(known or "", [])
if tools and not (shutil.which("c++") or shutil.which("g++")):
    names, m = names + [tools[0]], (m if m not in ("", "?") else known)
if tools and not (importlib.util.find_spec("venv") and importlib.util.find_spec("ensurepip")):
    names, m = names + [tools[1]], (m if m not in ("", "?") else known)
print(" ".join([m] + names) if m else "")' "$root"
}

line=$(plan)
read -r manager names <<<"$line" || true
if [ -z "${manager:-}" ]; then
  echo "install-system-libs: the libraries Qt's X11 plugin needs are all present"
  exit 0
fi
if [ "$manager" = "?" ]; then
  echo "install-system-libs: Qt's X11 plugin needs $names, missing here; this distribution is neither" \
       "Debian/Ubuntu nor Fedora: install the packages that provide them (the tray app says which when started)" >&2
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo=$(command -v sudo || true)
  if [ -z "$sudo" ]; then
    echo "install-system-libs: missing $names; run as root: $manager install $names" >&2
    exit 1
  fi
fi
echo "install-system-libs: installing $names ($manager)"
# shellcheck disable=SC2086  # $names is a list of package names
if [ "$manager" = apt ]; then
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $names
else
  $sudo dnf install -y $names
fi

line=$(plan)
read -r manager names <<<"$line" || true
if [ -n "${manager:-}" ]; then
  echo "install-system-libs: still missing after the install: $names" >&2
  exit 1
fi
echo "install-system-libs: done"
