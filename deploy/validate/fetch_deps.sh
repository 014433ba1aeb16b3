#!/usr/bin/env bash
# Fetches what the manifest checker needs into deploy/validate/.deps (gitignored),
# all from Debian's archive, without changing the machine's apt configuration:
#   - Kubernetes' own Go API types and apimachinery (golang-k8s-api-dev,
#     golang-k8s-apimachinery-dev and their Go library dependencies) and Debian's
#     kustomize, from trixie: bookworm has neither;
#   - a Go toolchain new enough to build them (golang-1.23 from bookworm-backports;
#     bookworm's 1.19 is too old).
# Debian's Go library packages are plain source trees, and the toolchain runs from
# any directory, so each .deb is unpacked with dpkg -x; nothing is installed.
# A private apt state (lists, cache, an empty dpkg status) resolves the dependencies.
# Safe to run again: it does nothing once the stamp for this package set exists.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
deps="${PS_K8S_DEPS_DIR:-$here/.deps}"
# Bump when the set below changes, so that existing trees are refetched.
stamp="$deps/.complete-v1"
if [[ -f "$stamp" ]]; then
  exit 0
fi

roots=(golang-k8s-api-dev golang-k8s-apimachinery-dev)
tools=(kustomize/trixie golang-1.23-go/bookworm-backports golang-1.23-src/bookworm-backports)

for tool in apt-get apt-cache dpkg; do
  command -v "$tool" >/dev/null || { echo "fetch_deps: needs $tool (Debian)" >&2; exit 1; }
done

apt_dir="$deps/apt"
rm -rf "$deps"
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/debs" "$deps/root"
cat >"$apt_dir/sources.list" <<'EOF'
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm-backports main
EOF
: >"$apt_dir/status"
apt_opts=(
  -o "Dir::Etc::SourceList=$apt_dir/sources.list"
  -o "Dir::Etc::SourceParts=$apt_dir/no-parts"
  -o "Dir::Etc::Preferences=$apt_dir/no-preferences"
  -o "Dir::Etc::PreferencesParts=$apt_dir/no-preferences.d"
  -o "Dir::State::Lists=$apt_dir/lists"
  -o "Dir::State::status=$apt_dir/status"
  -o "Dir::Cache=$apt_dir/cache"
  -o "APT::Architecture=amd64"
  -o "APT::Default-Release=trixie"
  -o "APT::Sandbox::User=root"
)

echo "fetch_deps: reading Debian trixie and bookworm-backports package lists" >&2
apt-get "${apt_opts[@]}" -qq update

# Every Go library the roots depend on, transitively. Only golang-*-dev
# packages are source trees; the toolchain and C libraries they may pull in
# (golang-go, libc6, ...) are not needed: the toolchain is fetched above.
apt-cache "${apt_opts[@]}" depends --recurse --no-recommends --no-suggests \
  --no-conflicts --no-breaks --no-replaces --no-enhances "${roots[@]}" |
  grep -E '^golang-[a-z0-9.+-]+-dev$' | sort -u >"$apt_dir/go-libraries.txt"
if ! grep -qx golang-k8s-api-dev "$apt_dir/go-libraries.txt"; then
  echo "fetch_deps: could not resolve ${roots[*]} in Debian trixie" >&2
  exit 1
fi

echo "fetch_deps: downloading $(wc -l <"$apt_dir/go-libraries.txt") Go library packages, Go 1.23 and kustomize" >&2
(cd "$apt_dir/debs" &&
  apt-get "${apt_opts[@]}" -qq download $(cat "$apt_dir/go-libraries.txt") "${tools[@]}")
for deb in "$apt_dir/debs"/*.deb; do
  dpkg -x "$deb" "$deps/root"
done
(cd "$apt_dir/debs" && ls) >"$deps/packages.txt"
rm -rf "$apt_dir/debs" "$apt_dir/cache" "$apt_dir/lists"

"$deps/root/usr/lib/go-1.23/bin/go" version >/dev/null
"$deps/root/usr/bin/kustomize" version >/dev/null
touch "$stamp"
echo "fetch_deps: ready in $deps (package list: $deps/packages.txt)" >&2
