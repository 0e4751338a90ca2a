#!/usr/bin/env bash
# Makes the base image debian:bookworm-slim locally, for machines that cannot pull from a
# registry: debootstrap (minbase variant) from a Debian mirror, then `docker import`. Does
# nothing when the image is already there (--force makes it again).
#
#   deploy/docker/make-base-image.sh [--force] [--tag=debian:bookworm-slim]
#
# Needs root, debootstrap and a running docker daemon. The mirror is $DEBIAN_MIRROR (default
# http://deb.debian.org/debian; the image's apt uses the same one, plus bookworm-updates and
# bookworm-security from $DEBIAN_SECURITY_MIRROR). Takes about two minutes. The result is like the
# official image (apt sources in deb822 form, no apt lists, no docs or man pages, no locales;
# about 75 MB).
set -euo pipefail
export PATH=$PATH:/usr/local/sbin:/usr/sbin:/sbin  # debootstrap, also from a PATH without sbin

tag=debian:bookworm-slim
force=0
for arg in "$@"; do
  case $arg in
    --force) force=1 ;;
    --tag=*) tag=${arg#--tag=} ;;
    *) echo "usage: $0 [--force] [--tag=IMAGE]" >&2; exit 2 ;;
  esac
done
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
security=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
docker=${DOCKER:-docker}

if [ "$force" = 0 ] && "$docker" image inspect "$tag" >/dev/null 2>&1; then
  echo "make-base-image: $tag is already there"
  exit 0
fi
command -v debootstrap >/dev/null || { echo "make-base-image: needs debootstrap (apt-get install debootstrap)" >&2; exit 1; }

rootfs=$(mktemp -d /tmp/dtrain-rootfs.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT
echo "make-base-image: debootstrap bookworm from $mirror into $rootfs"
debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$rootfs.log" 2>&1 || {
  tail -n 20 "$rootfs.log" >&2; rm -f "$rootfs.log"; exit 1; }
rm -f "$rootfs.log"

# apt: the official image's sources and its "docker-clean" settings; dpkg: no docs.
rm -f "$rootfs/etc/apt/sources.list"
cat >"$rootfs/etc/apt/sources.list.d/debian.sources" <<SOURCES
Types: deb
URIs: $mirror
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
cat >"$rootfs/etc/apt/apt.conf.d/docker-clean" <<'CONF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
CONF
echo 'Acquire::Languages "none";' >"$rootfs/etc/apt/apt.conf.d/docker-no-languages"
cat >"$rootfs/etc/dpkg/dpkg.cfg.d/docker" <<'CONF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
CONF
find "$rootfs/usr/share/doc" -mindepth 2 ! -name copyright ! -type d -delete 2>/dev/null || true
find "$rootfs/usr/share/doc" -mindepth 1 -type d -empty -delete 2>/dev/null || true
rm -rf "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* "$rootfs"/usr/share/locale/* \
  "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb \
  "$rootfs"/var/log/*.log "$rootfs"/tmp/* "$rootfs"/dev/*
: >"$rootfs/etc/hostname"

tar -C "$rootfs" --numeric-owner -c . |
  "$docker" import --change 'CMD ["bash"]' - "$tag" >/dev/null
echo "make-base-image: made $tag ($("$docker" image inspect -f '{{.Size}}' "$tag" | awk '{printf "%.0f MB", $1/1e6}'))"
