#!/usr/bin/env bash
# Build warden's container image with buildah, FROM scratch (see ../Containerfile for why).
#
#   deploy/build-image.sh [warden|redis]
#
# warden (default): the image of every warden subcommand. WARDEN_BIN names the binary to put in
#   it (default: `cargo build --release -p warden`, target/release/warden); it is stripped.
# redis: Debian's redis-server (and busybox's sh, when installed) in the same FROM-scratch
#   layout, for running the manifests offline (`podman kube play` in crates/warden/tests/
#   container.rs and kube_sentinel.rs); clusters use their own registry's Redis image.
#
# IMAGE names the result (default localhost/warden:VERSION, localhost/warden-redis:VERSION).
# buildah's storage is its default unless CONTAINERS_STORAGE_CONF says otherwise (the tests
# point it at a temporary root). Nothing is pulled. Prints the image's size last.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TARGET=${1:-warden}
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/Cargo.toml" | head -1)
command -v buildah >/dev/null || { echo "build-image.sh: buildah is not installed (apt-get install buildah)" >&2; exit 1; }

STAGE=$(mktemp -d "${TMPDIR:-/tmp}/warden-image.XXXXXX")
trap 'rm -rf "$STAGE"' EXIT
ROOTFS="$STAGE/rootfs"
mkdir -p "$ROOTFS"/{etc,tmp,run,usr/local/bin,usr/sbin,usr/bin,bin}
chmod 1777 "$ROOTFS/tmp"
PKGS=()

# copy_file SRC [DEST-IN-ROOTFS]: a regular file (symlinks followed) at the same path, and
# remember its Debian package for the copyright files.
copy_file() {
  local src=$1 dest=${2:-$1}
  mkdir -p "$ROOTFS$(dirname "$dest")"
  cp -L --preserve=mode "$src" "$ROOTFS$dest"
  local pkg
  pkg=$(dpkg -S "$(readlink -f "$src")" 2>/dev/null | head -1 | cut -d: -f1) || true
  [ -z "$pkg" ] && pkg=$(dpkg -S "$src" 2>/dev/null | head -1 | cut -d: -f1) || true
  [ -n "$pkg" ] && PKGS+=("$pkg")
  return 0
}

# copy_libs FILE...: every shared library ldd lists for the files, and the dynamic loader.
copy_libs() {
  local lib
  for lib in $(ldd "$@" 2>/dev/null | awk '/=> \//{print $3} /^[ \t]*\/lib/{print $1}' | sort -u); do
    [ -e "$ROOTFS$lib" ] || copy_file "$lib"
  done
}

case "$TARGET" in
warden)
  IMAGE=${IMAGE:-localhost/warden:$VERSION}
  if [ -z "${WARDEN_BIN:-}" ]; then
    (cd "$ROOT" && cargo build --release -q -p warden)
    WARDEN_BIN="${CARGO_TARGET_DIR:-$ROOT/target}/release/warden"
  fi
  # The debug sections stay on the build host: the image needs the code only.
  strip -o "$ROOTFS/usr/local/bin/warden" "$WARDEN_BIN"
  chmod 0755 "$ROOTFS/usr/local/bin/warden"
  # envoyproxy/ratelimit's image runs /bin/ratelimit; warden called by that name is
  # `warden ratelimit`, so its Deployments keep their `command`.
  ln -s ../usr/local/bin/warden "$ROOTFS/bin/ratelimit"
  copy_libs "$WARDEN_BIN"
  # iptables for `warden capture` in the init container: both backends, `iptables` being the
  # nft one as in Debian (istio-iptables also defaults to nft where the host has no legacy rules).
  command -v xtables-nft-multi >/dev/null || { echo "build-image.sh: iptables is not installed" >&2; exit 1; }
  for multi in xtables-nft-multi xtables-legacy-multi; do
    copy_file "$(command -v $multi)" "/usr/sbin/$multi"
    copy_libs "$(command -v $multi)"
  done
  for fam in iptables ip6tables; do
    for suffix in "" -save -restore; do
      ln -s xtables-nft-multi "$ROOTFS/usr/sbin/$fam$suffix"
      ln -s xtables-nft-multi "$ROOTFS/usr/sbin/$fam-nft$suffix"
      ln -s xtables-legacy-multi "$ROOTFS/usr/sbin/$fam-legacy$suffix"
    done
  done
  XT=/usr/lib/x86_64-linux-gnu/xtables
  [ -d "$XT" ] || XT=$(dirname "$(dpkg -L libxtables12 | grep '/xtables/lib.*\.so$' | head -1)")
  for m in "$XT"/*.so; do copy_file "$m"; done
  copy_libs "$XT"/*.so
  [ -f /etc/ssl/certs/ca-certificates.crt ] && copy_file /etc/ssl/certs/ca-certificates.crt
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nwarden:x:1337:1337:warden (istio-proxy uid):/nonexistent:/sbin/nologin\n' >"$ROOTFS/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\nwarden:x:1337:\n' >"$ROOTFS/etc/group"
  CONTAINERFILE="$ROOT/Containerfile"
  ;;
redis)
  IMAGE=${IMAGE:-localhost/warden-redis:$VERSION}
  command -v redis-server >/dev/null || { echo "build-image.sh: redis-server is not installed" >&2; exit 1; }
  copy_file "$(command -v redis-server)" /usr/bin/redis-server
  copy_libs "$(command -v redis-server)"
  ln -s redis-server "$ROOTFS/usr/bin/redis-sentinel"
  # redis:alpine, the image the manifests name, has a shell: redis-sentinel.yaml's containers
  # pick their role and write sentinel.conf with it. Debian's static busybox stands in for
  # Alpine's (without it the image runs redis.yaml only).
  if command -v busybox >/dev/null; then
    copy_file "$(command -v busybox)" /bin/busybox
    for applet in sh cat; do ln -s busybox "$ROOTFS/bin/$applet"; done
  fi
  mkdir -p "$ROOTFS/data"
  chmod 0777 "$ROOTFS/data"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nredis:x:999:999:redis:/data:/sbin/nologin\n' >"$ROOTFS/etc/passwd"
  printf 'root:x:0:\nredis:x:999:\n' >"$ROOTFS/etc/group"
  CONTAINERFILE="$STAGE/Containerfile"
  cat >"$CONTAINERFILE" <<'EOC'
FROM scratch
COPY rootfs/ /
USER 999:999
WORKDIR /data
ENTRYPOINT ["/usr/bin/redis-server"]
CMD ["--protected-mode", "no"]
EOC
  ;;
*)
  echo "usage: $0 [warden|redis]" >&2
  exit 2
  ;;
esac

printf 'hosts: files dns\n' >"$ROOTFS/etc/nsswitch.conf"
# The licence of every Debian package a file came from.
for pkg in $(printf '%s\n' "${PKGS[@]}" | sort -u); do
  doc="/usr/share/doc/${pkg%%:*}/copyright"
  [ -f "$doc" ] && copy_file "$doc"
done

buildah build --quiet --pull=never --format oci \
  --label "org.opencontainers.image.title=$TARGET" \
  --label "org.opencontainers.image.version=$VERSION" \
  --label "org.opencontainers.image.source=warden deploy/build-image.sh" \
  -f "$CONTAINERFILE" -t "$IMAGE" "$STAGE" >/dev/null
size=$(buildah images --format '{{.Size}}' "$IMAGE" | head -1)
echo "built $IMAGE ($size; files: $(du -sh --apparent-size "$ROOTFS" | cut -f1))"
