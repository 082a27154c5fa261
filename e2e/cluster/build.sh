#!/usr/bin/env bash
# Builds the pinned control-plane programs (kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, etcd, helm) from the Go module proxy into
# ~/.cache/tandem-e2e/<key>/bin, or reuses them when that directory is complete.
#
# The key names the pinned versions and a hash of the three build modules (go.mod and
# go.sum) and of this script, so changing a pin or a flag builds afresh and never mixes
# versions. A build goes to a
# temporary directory renamed into place at the end: an interrupted build is never reused.
#
# Prints `BIN=/abs/path` as its last line. Usage: bash e2e/cluster/build.sh [--print-key]
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
mods="$here/build"
cache_root="${TANDEM_E2E_CACHE:-$HOME/.cache/tandem-e2e}"

# The version a build module requires of a module, read from its go.mod.
pinned() {
  awk -v m="$2" '$1 == "require" { $1 = ""; $0 = $0 } $1 == m && $2 != "=>" { print $2; exit }' \
    "$mods/$1/go.mod"
}

kube_v="$(pinned kube k8s.io/kubernetes)"
etcd_v="$(pinned etcd go.etcd.io/etcd/server/v3)"
helm_v="$(pinned helm helm.sh/helm/v4)"
for v in "$kube_v" "$etcd_v" "$helm_v"; do
  if [[ -z "$v" ]]; then
    echo "build.sh: a pinned version is missing from $mods/*/go.mod" >&2
    exit 2
  fi
done
go_v="$(go env GOVERSION)"
# This script's own flags (version stamps) change the programs too.
sum="$(cat "$mods"/{kube,etcd,helm}/go.{mod,sum} "$0" | sha256sum | cut -c1-12)"
key="k8s-${kube_v}_etcd-${etcd_v}_helm-${helm_v}_${go_v}_${sum}"
if [[ "${1:-}" == "--print-key" ]]; then
  echo "$key"
  exit 0
fi

bin="$cache_root/$key/bin"
programs=(kube-apiserver kube-controller-manager kube-scheduler kubectl etcd helm)
complete=1
for p in "${programs[@]}"; do [[ -x "$bin/$p" ]] || complete=0; done
if [[ "$complete" == 1 ]]; then
  echo "build.sh: reusing $bin"
  echo "BIN=$bin"
  exit 0
fi

mkdir -p "$cache_root/$key"
tmp="$(mktemp -d "$cache_root/$key/bin.partial.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

# Static binaries (no C toolchain needed, as the Kubernetes releases are built); no debug
# information or module paths, which shortens linking and shrinks the cache.
export CGO_ENABLED=0 GOFLAGS="-trimpath -buildvcs=false -mod=readonly"
ldflags="-s -w"
# The version stamps the release scripts set: without them every program reports
# v0.0.0-master, which kubectl cannot parse and Helm's kubeVersion checks reject.
kube_minor="${kube_v#v1.}"
kube_minor="${kube_minor%%.*}"
kube_stamp=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  kube_stamp+=" -X $pkg.gitVersion=$kube_v -X $pkg.gitMajor=1 -X $pkg.gitMinor=$kube_minor"
  kube_stamp+=" -X $pkg.gitTreeState=clean"
done
helm_stamp="-X helm.sh/helm/v4/internal/version.version=$helm_v -X helm.sh/helm/v4/internal/version.gitTreeState=clean"

start=$(date +%s)
# build MODULE STAMP OUTPUT PACKAGE...: OUTPUT is a file for one package, the directory
# for several; STAMP adds to the linker flags.
build() {
  local mod="$1" stamp="$2" out="$3"
  shift 3
  local t0
  t0=$(date +%s)
  echo "build.sh: building $* ($mod module)"
  (cd "$mods/$mod" && go build -ldflags="$ldflags $stamp" -o "$out" "$@")
  echo "build.sh: $mod built in $(($(date +%s) - t0)) s"
}
build etcd "" "$tmp/etcd" go.etcd.io/etcd/server/v3
build helm "$helm_stamp" "$tmp/helm" helm.sh/helm/v4/cmd/helm
build kube "$kube_stamp" "$tmp/" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl

for p in "${programs[@]}"; do
  if [[ ! -x "$tmp/$p" ]]; then
    echo "build.sh: $p was not built" >&2
    exit 1
  fi
done
rm -rf "$bin"
mv "$tmp" "$bin"
trap - EXIT
echo "build.sh: built ${programs[*]} in $(($(date +%s) - start)) s"
echo "BIN=$bin"
