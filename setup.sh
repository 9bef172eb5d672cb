#!/usr/bin/env bash
# Set up nest_experiments on Debian/Ubuntu (idempotent), then run or test.
#
#   sudo ./setup.sh            set up only
#   sudo ./setup.sh run [ARGS] set up, then: python -m nest_experiments run [ARGS]
#   sudo ./setup.sh test [ARGS] set up, then the whole test suite (lint, host tests, then VM tests)
#   ./setup.sh tests SUITE...   only run these suites (lint, unit, integration, host, vm) with the venv
#                               as it is: no install, root only for the suites that need it (tox.ini calls this)
#
# What it does: apt-get installs the tools (iproute2, iperf3, SIPp, httperf,
# qemu, ffmpeg, chromium, firefox-esr, ...), makes a virtualenv in ./.venv with the pinned requirements,
# installs dash.js (npm ci in web/, pinned by web/package-lock.json),
# installs this project into it (editable), builds the quic-go fetcher and
# Caddy (native/, when Go >= 1.26 is installed) into it, installs GPAC (player = "gpac": on Debian 12
# bullseye's gpac 1.0.1, pinned so that nothing of bookworm is replaced; NEST_GPAC=0 skips it) and links
# /usr/lib/tc to Debian's netem tables (NeST reads them there).
set -euo pipefail
cd "$(dirname "$0")"

APT_PACKAGES=(iproute2 iputils-ping ethtool iperf3 sip-tester httperf mptcpd tcpdump tshark ffmpeg nftables
              qemu-system-x86 busybox-static cpio kmod procps psmisc util-linux caddy nginx webfs gcc libc6-dev python3-venv)
# the DASH players' packages (chromium, firefox-esr, ...) are named in their records (nest_experiments/dash/players):
# install_player_packages asks the venv for them

# seconds to wait for another apt/dpkg to release its lock
APT_LOCK_TIMEOUT=${APT_LOCK_TIMEOUT:-600}

apt_busy() {
  # a process holds one of apt's or dpkg's lock files (fuser: psmisc, on every Debian/Ubuntu install with apt)
  command -v fuser >/dev/null || return 1
  fuser /var/lib/dpkg/lock-frontend /var/lib/dpkg/lock /var/lib/apt/lists/lock /var/cache/apt/archives/lock \
    >/dev/null 2>&1
}

say_waiting() {
  echo "setup.sh: apt/dpkg is busy (another install or an unattended upgrade); waiting up to" \
       "${APT_LOCK_TIMEOUT} s for its lock (APT_LOCK_TIMEOUT=...)" >&2
}

apt_update() {
  # apt-get update ignores DPkg::Lock::Timeout for its lists lock (apt 2.6): retry while the lock is held
  local waited=0 out
  until out=$(apt-get -o "DPkg::Lock::Timeout=$APT_LOCK_TIMEOUT" update -q 2>&1); do
    if ! grep -q "Could not get lock" <<<"$out" || [ "$waited" -ge "$APT_LOCK_TIMEOUT" ]; then
      echo "$out" >&2
      return 1
    fi
    if [ "$waited" -eq 0 ]; then say_waiting; fi
    sleep 5
    waited=$((waited + 5))
  done
  echo "$out" >&2
}

need_root() {
  if [ "$(id -u)" -ne 0 ]; then echo "setup.sh: run as root (sudo ./setup.sh ...)" >&2; exit 1; fi
}

install_packages() {
  # install_packages PACKAGE...: those not installed yet
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "setup.sh: installing ${missing[*]}" >&2
    # another apt or dpkg (an unattended upgrade, another install) may hold the lock: wait for it
    local lock=(-o "DPkg::Lock::Timeout=$APT_LOCK_TIMEOUT")
    apt_update
    if apt_busy; then say_waiting; fi
    echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
    # packages with a service (nginx, caddy) must not start one: the apps start their own servers in namespaces
    local policy=/usr/sbin/policy-rc.d own_policy=0
    if [ ! -e "$policy" ]; then
      printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy" && own_policy=1
    fi
    local status=0
    DEBIAN_FRONTEND=noninteractive apt-get "${lock[@]}" install -y -q --no-install-recommends "${missing[@]}" || status=$?
    if [ "$own_policy" = 1 ]; then rm -f "$policy"; fi
    if [ "$status" -ne 0 ]; then exit "$status"; fi
  fi
}

python_bin() {
  # the interpreter the venv is made from; it must stay visible inside the VM (not under /tmp)
  command -v python3.11 || command -v python3
}

make_venv() {
  local py
  py=$(python_bin)
  if [ ! -x .venv/bin/python ]; then
    "$py" -m venv .venv
  fi
  local stamp=.venv/.requirements.sha
  local want
  want=$(cat requirements.txt requirements-dev.txt setup.cfg | sha256sum | cut -d' ' -f1)
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    .venv/bin/pip install -q --upgrade pip >/dev/null
    .venv/bin/pip install -q -r requirements.txt -r requirements-dev.txt
    .venv/bin/pip install -q --no-deps -e .
    echo "$want" > "$stamp"
  fi
}

install_player_packages() {
  # the packages each DASH player's record names (python -m nest_experiments.dash.players --apt)
  local text pkgs
  text=$(.venv/bin/python -m nest_experiments.dash.players --apt)
  read -ra pkgs <<<"$text"
  if [ ${#pkgs[@]} -gt 0 ]; then install_packages "${pkgs[@]}"; fi
}

build_go() {
  # build_go MODULE BINARY: native/MODULE (a Go module pinned by its go.sum) into the venv's bin, once per source
  local src=native/$1 out=.venv/bin/$2 stamp=.venv/.$1.sha want
  want=$(cat "$src"/go.mod "$src"/go.sum "$src"/*.go | sha256sum | cut -d' ' -f1)
  if [ -x "$out" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then return 0; fi
  echo "setup.sh: building $out from $src (Go modules from the module proxy; Caddy takes 2-3 minutes)" >&2
  (cd "$src" && GOFLAGS=-mod=readonly go build -trimpath -o "../../$out" .)
  echo "$want" > "$stamp"
}

build_native() {
  # nest-h3get (the player's HTTP/3 fetcher on quic-go: h3_client = "quic-go") and Caddy with a current quic-go
  # (UDP GSO), the DASH app's h3 origin; both need Go >= 1.26 (their go.mod)
  if ! command -v go >/dev/null; then
    echo "setup.sh: no Go toolchain: h3_client = \"quic-go\" will not be available and http_server = \"caddy\"" \
      "uses Debian's older Caddy (install Go >= 1.26 from go.dev/dl, then run ./setup.sh again; Debian 12's" \
      "golang package is too old)" >&2
    return 0
  fi
  build_go h3get nest-h3get
  build_go caddy caddy
}

install_web() {
  # dash.js (player = "dashjs"), pinned with its integrity hashes in web/package-lock.json; only its
  # prebuilt dist/ file is used (served to Chromium from the media folder), so no build and no scripts
  if ! command -v npm >/dev/null; then
    apt_update
    DEBIAN_FRONTEND=noninteractive apt-get -o "DPkg::Lock::Timeout=$APT_LOCK_TIMEOUT" install -y -q \
      --no-install-recommends npm
  fi
  local stamp=web/node_modules/.package-lock.sha want
  want=$(sha256sum web/package-lock.json | cut -d' ' -f1)
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    (cd web && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
    echo "$want" > "$stamp"
  fi
}

GPAC_SOURCES=/etc/apt/sources.list.d/nest-bullseye-gpac.sources
GPAC_PIN=/etc/apt/preferences.d/nest-bullseye-gpac

install_gpac() {
  # player = "gpac": Debian 12 has no gpac; bullseye's 1.0.1 (its libraries have their own sonames) installs
  # beside bookworm's: a bullseye source pinned at 100, so nothing of bookworm is ever replaced or upgraded
  # from it and only what bookworm lacks comes from bullseye. xvfb: 1.0's video output needs an X display.
  # Opt out with NEST_GPAC=0.
  if [ "${NEST_GPAC:-1}" = 0 ] || { command -v gpac >/dev/null && command -v Xvfb >/dev/null; }; then return 0; fi
  local codename
  codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
  if [ "$(. /etc/os-release && echo "${ID:-}")" != debian ] || [ "$codename" != bookworm ]; then
    echo "setup.sh: player = \"gpac\" needs gpac: on Ubuntu apt-get install gpac; elsewhere build it from" \
      "https://github.com/gpac/gpac (only Debian 12 gets bullseye's gpac from here)" >&2
    return 0
  fi
  echo "setup.sh: installing gpac 1.0.1 from Debian bullseye (pinned, nothing of bookworm replaced) and xvfb" >&2
  printf '%s\n' "# nest_experiments setup.sh: bullseye's gpac 1.0.1 (bookworm has none); pinned low in $GPAC_PIN" \
    "Types: deb" "URIs: http://deb.debian.org/debian" "Suites: bullseye" "Components: main" \
    "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" > "$GPAC_SOURCES"
  printf '%s\n' "# nest_experiments setup.sh: bullseye only for what bookworm lacks (gpac and its libraries)" \
    "Package: *" "Pin: release n=bullseye" "Pin-Priority: 100" > "$GPAC_PIN"
  apt_update
  DEBIAN_FRONTEND=noninteractive apt-get -o "DPkg::Lock::Timeout=$APT_LOCK_TIMEOUT" install -y -q \
    --no-install-recommends gpac xvfb
}

link_tc_tables() {
  if [ ! -e /usr/lib/tc ] && [ -d /usr/lib/x86_64-linux-gnu/tc ]; then
    ln -s /usr/lib/x86_64-linux-gnu/tc /usr/lib/tc
  fi
}

# The tests: their one definition, used by `setup.sh test` (the README's and CI's command) and by tox.ini.
run_suite() {
  local suite=$1
  shift
  case "$suite" in
    lint) .venv/bin/ruff check nest_experiments tests bench && .venv/bin/mypy nest_experiments ;;
    unit) .venv/bin/python -m pytest tests/unit "$@" ;;  # no root
    integration) .venv/bin/python -m pytest tests/integration -m "not vm" "$@" ;;  # real namespaces, host kernel
    host) .venv/bin/python -m pytest -m "not vm" "$@" ;;  # unit + integration
    vm) .venv/bin/python -m pytest -m vm --nest-runtime vm "$@" ;;  # the tests needing pie/fq_pie/netem, in the VM
    *) echo "setup.sh: unknown test suite '$suite' (lint, unit, integration, host, vm)" >&2; return 2 ;;
  esac
}

run_suites() {
  # SUITE... [-- PYTEST_ARGS]
  local suites=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do suites+=("$1"); shift; done
  if [ $# -gt 0 ]; then shift; fi
  if [ ${#suites[@]} -eq 0 ]; then echo "usage: ./setup.sh tests SUITE... [-- PYTEST_ARGS]" >&2; exit 2; fi
  if [ ! -x .venv/bin/python ]; then echo "setup.sh: no .venv yet: run sudo ./setup.sh first" >&2; exit 1; fi
  for suite in "${suites[@]}"; do
    case "$suite" in integration|host|vm) need_root ;; esac
    if [ "$suite" = lint ]; then run_suite lint; else run_suite "$suite" "$@"; fi
  done
}

if [ "${1:-}" = tests ]; then
  shift
  run_suites "$@"
  exit 0
fi

need_root
install_packages "${APT_PACKAGES[@]}"
make_venv
install_player_packages
build_native
install_web
install_gpac
link_tc_tables

case "${1:-}" in
  "") echo "setup.sh: ready. Run: sudo .venv/bin/python -m nest_experiments run" >&2 ;;
  run) shift; exec .venv/bin/python -m nest_experiments run "$@" ;;
  test) shift; run_suites lint host vm -- "$@" ;;
  *) echo "usage: sudo ./setup.sh [run [ARGS] | test [ARGS] | tests SUITE... [-- PYTEST_ARGS]]" >&2; exit 2 ;;
esac
