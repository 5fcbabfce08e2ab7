#!/usr/bin/env bash
# Install (or check) the Debian packages the real node and its image builds need, at pinned versions.
#
# containerd and runc run the node's containers (crun refuses these hosts' hybrid cgroups); the CNI
# plugins give Pods their addresses; iptables is kube-proxy's; buildah builds the Dockerfile without a
# daemon; mmdebstrap makes the Debian bookworm stand-ins for the base images no registry can give us;
# gcc and libc6-dev build the pause binary (Kubernetes' own pause.c), linked static.
# Needs root (apt-get), as the node itself does. Does nothing when every pin is already installed.
set -euo pipefail

packages=(
  "containerd=1.6.20~ds1-1+deb12u3"
  "runc=1.1.5+ds1-1+deb12u1"
  "containernetworking-plugins=1.1.1+ds1-3+b5"
  "iptables=1.8.9-2"
  "buildah=1.28.2+ds1-3+deb12u1+b3"
  "mmdebstrap=1.3.5-7"
  "gcc=4:12.2.0-3"  # the pause binary, linked static
  "libc6-dev"       # unpinned: it must match the host's libc6, which is not ours to change
)

missing=()
for pin in "${packages[@]}"; do
  name=${pin%%=*} version=${pin#*=}
  installed=$(dpkg-query -W -f='${db:Status-Status} ${Version}' "$name" 2>/dev/null || true)
  if [[ "$pin" == "$name" ]]; then
    [[ "$installed" == installed* ]] || missing+=("$pin")
  else
    [[ "$installed" == "installed $version" ]] || missing+=("$pin")
  fi
done
(( ${#missing[@]} == 0 )) && exit 0

if [[ $(id -u) != 0 ]]; then
  echo "node-packages.sh: the real node needs root, and these packages: ${missing[*]}" >&2
  exit 1
fi
command -v apt-get >/dev/null || { echo "node-packages.sh: apt-get not found (Debian 12 is required)" >&2; exit 1; }
echo "installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
