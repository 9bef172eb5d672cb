#!/usr/bin/env bash
# Set up nest_experiments on Debian/Ubuntu (idempotent), then run or test.
#
#   sudo ./setup.sh            set up only
#   sudo ./setup.sh run [ARGS] set up, then: python -m nest_experiments run [ARGS]
#   sudo ./setup.sh test [ARGS] set up, then the whole test suite (host tests, then VM tests)
#
# What it does: apt-get installs the tools (iproute2, iperf3, SIPp, httperf,
# qemu, ...), makes a virtualenv in ./.venv with the pinned requirements,
# installs this project into it (editable), and links /usr/lib/tc to
# Debian's netem tables (NeST reads them there).
set -euo pipefail
cd "$(dirname "$0")"

APT_PACKAGES=(iproute2 iputils-ping ethtool iperf3 sip-tester httperf mptcpd tcpdump tshark ffmpeg nftables
              qemu-system-x86 busybox-static cpio kmod procps psmisc util-linux caddy nginx gcc libc6-dev python3-venv)

need_root() {
  if [ "$(id -u)" -ne 0 ]; then echo "setup.sh: run as root (sudo ./setup.sh ...)" >&2; exit 1; fi
}

install_packages() {
  local missing=()
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "setup.sh: installing ${missing[*]}" >&2
    apt-get update -q
    echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
    # packages with a service (nginx, caddy) must not start one: the apps start their own servers in namespaces
    local policy=/usr/sbin/policy-rc.d own_policy=0
    if [ ! -e "$policy" ]; then
      printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy" && own_policy=1
    fi
    local status=0
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" || status=$?
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

link_tc_tables() {
  if [ ! -e /usr/lib/tc ] && [ -d /usr/lib/x86_64-linux-gnu/tc ]; then
    ln -s /usr/lib/x86_64-linux-gnu/tc /usr/lib/tc
  fi
}

need_root
install_packages
make_venv
link_tc_tables

case "${1:-}" in
  "") echo "setup.sh: ready. Run: sudo .venv/bin/python -m nest_experiments run" >&2 ;;
  run) shift; exec .venv/bin/python -m nest_experiments run "$@" ;;
  test)
    shift
    .venv/bin/python -m pytest -m "not vm" "$@"
    exec .venv/bin/python -m pytest -m vm --runtime vm "$@" ;;
  *) echo "usage: sudo ./setup.sh [run [ARGS] | test [ARGS]]" >&2; exit 2 ;;
esac
