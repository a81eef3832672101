#!/usr/bin/env bash
# Build the images where no container registry is reachable (this machine, CI):
#   1. the base image `wan-harness-base:bookworm` from Debian packages (debootstrap minbase + python3,
#      iptables; then `docker import`), skipped when it exists (--rebuild-base forces it);
#   2. the wheelhouse docker/wheelhouse/ (git-ignored): every Python dependency as a wheel, made by
#      the host's pip (torch is the CPU wheel pinned in pyproject.toml), so the image build needs
#      no network inside a container;
#   3. with --image, the project image `wan-harness:latest` (what docker-compose.yml runs).
# Usage: docker/build-base.sh [--image] [--rebuild-base]      (root; needs debootstrap and docker)
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=${BASE_IMAGE:-wan-harness-base:bookworm}
SUITE=${DEBIAN_SUITE:-bookworm}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
# the host's pip makes the wheelhouse: the project's venv where there is one (a bare python3 may lack pip)
if [[ -x .venv/bin/python ]]; then PY=${PYTHON:-.venv/bin/python}; else PY=${PYTHON:-python3}; fi
build_image=0 rebuild=0
for arg in "$@"; do
  case "$arg" in
    --image) build_image=1 ;;
    --rebuild-base) rebuild=1 ;;
    *) echo "build-base.sh: unknown argument $arg (valid: --image, --rebuild-base)" >&2; exit 2 ;;
  esac
done
command -v docker >/dev/null || { echo "build-base.sh: docker is not installed (apt-get install -y docker.io)" >&2; exit 2; }

if [[ $rebuild == 1 ]] || ! docker image inspect "$BASE" >/dev/null 2>&1; then
  command -v debootstrap >/dev/null || { echo "build-base.sh: debootstrap is not installed (apt-get install -y debootstrap)" >&2; exit 2; }
  root=$(mktemp -d /tmp/wan-base.XXXXXX)
  trap 'rm -rf "$root"' EXIT
  # python3-venv: the image's virtualenv; iptables: the fallback shaper's loss rules (iptables-restore)
  debootstrap --variant=minbase --include=python3,python3-venv,iptables,ca-certificates "$SUITE" "$root" "$MIRROR" >/dev/null
  # docs, man pages, apt lists and caches are not needed to run the harness (~60 MB)
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb \
         "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/locale/*
  tar -C "$root" -c . | docker import -c 'ENV LANG=C.UTF-8' -c 'CMD ["/bin/bash"]' - "$BASE" >/dev/null
  rm -rf "$root"; trap - EXIT
  echo "build-base.sh: base image $BASE built"
fi

# The wheelhouse: the project's dependencies (not the project: the image installs it from source).
# The image's python is Debian's python3 (3.11 on bookworm): the host must make wheels for the same
# minor version, or pip picks incompatible wheels.
want=$(docker run --rm "$BASE" python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
have=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
[[ "$want" == "$have" ]] || { echo "build-base.sh: the base image has python $want, the host's $PY is $have (set PYTHON=python$want)" >&2; exit 2; }
mkdir -p docker/wheelhouse
# setuptools: the project's build backend (the image installs it with --no-index)
"$PY" -m pip download -q -d docker/wheelhouse . "setuptools>=68" 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }
rm -f docker/wheelhouse/wan_harness-* docker/wheelhouse/wan-harness-*
# sdists (a dependency without a wheel) become wheels here, so the image build compiles nothing
for sdist in docker/wheelhouse/*.tar.gz; do
  [[ -e "$sdist" ]] || continue
  "$PY" -m pip wheel -q --no-deps -w docker/wheelhouse "$sdist" && rm -f "$sdist"
done
echo "build-base.sh: wheelhouse docker/wheelhouse ($(ls docker/wheelhouse | wc -l) wheels, $(du -sh docker/wheelhouse | cut -f1))"

# The image, and no dangling one left behind: the build stage (the venv with torch, ~1.5 GB) is
# tagged wan-harness-build:latest, so it is the next build's layer cache instead of an untagged
# image; an image that a new build replaces under the same tag is removed (unless a container uses it).
if [[ $build_image == 1 ]]; then
  image_id() { docker image inspect -f '{{.Id}}' "$1" 2>/dev/null || true; }
  old_final=$(image_id wan-harness:latest) old_build=$(image_id wan-harness-build:latest)
  dangling_before=$(docker images -q --no-trunc -f dangling=true | sort)
  sha=$(git rev-parse HEAD 2>/dev/null || true)
  dirty=$([[ -n "$sha" && -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]] && echo 1 || echo 0)
  docker build -q --build-arg BASE_IMAGE="$BASE" --build-arg GIT_SHA="$sha" --build-arg GIT_DIRTY="$dirty" \
    -t wan-harness:latest . >/dev/null
  # the stage the image was just built from (a cache hit), tagged: untagged, it is a dangling image
  docker build -q --build-arg BASE_IMAGE="$BASE" --target build -t wan-harness-build:latest . >/dev/null
  for id in "$old_final" "$old_build"; do
    if [[ -n "$id" && "$id" != "$(image_id wan-harness:latest)" && "$id" != "$(image_id wan-harness-build:latest)" ]]; then
      docker rmi "$id" >/dev/null 2>&1 || echo "build-base.sh: the replaced image ${id:7:12} is still used by a container: docker rmi it after removing that container" >&2
    fi
  done
  # a file that changed between the two builds (pyproject.toml) leaves the first build's stage untagged:
  # remove the dangling images this script made (not those it found)
  for id in $(comm -13 <(echo "$dangling_before") <(docker images -q --no-trunc -f dangling=true | sort)); do
    docker rmi "$id" >/dev/null 2>&1 || echo "build-base.sh: could not remove the dangling image ${id:7:12}" >&2
  done
  echo "build-base.sh: image wan-harness:latest built on $BASE (commit ${sha:0:12}$([[ $dirty == 1 ]] && echo ', with uncommitted changes'))"
fi
