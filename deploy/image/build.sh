#!/bin/bash
# Build the capwatch image with buildah, without any container registry:
#   1. base images from Debian packages (mmdebstrap: minbase + python3 for the runtime,
#      + binutils, gcc and python3-dev for the builder), imported once;
#   2. a wheelhouse (capwatch + dependencies, incl. up-fast-downward) built on the host
#      with the host's pip (host and base must share the Python minor version), the
#      wheels that compile the hot path (mypy, i.e. mypyc, and setuptools) and capwatch's
#      sources: the builder stage compiles the hot path against the image's own Python
#      (capwatch/native.py, docs/performance.md "Compiled modules");
#   3. buildah bud of ./Dockerfile on that context;
#   4. a smoke test in podman (deploy/image/smoke.sh).
# Needs root (or rootless podman with user namespaces), buildah, podman, mmdebstrap, and
# runc on hosts with hybrid cgroups (crun refuses them).
# Environment: IMAGE (capwatch:VERSION), BASE_IMAGE and BUILDER_IMAGE (made here by
# default), SUITE (bookworm),
# MIRROR, EXTRAS (otel; empty for none), SKIP_SMOKE=1.
set -eu
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
VERSION="$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/pyproject.toml")"
IMAGE="${IMAGE:-localhost/capwatch:$VERSION}"
SUITE="${SUITE:-bookworm}"
MIRROR="${MIRROR:-http://deb.debian.org/debian}"
WORK="$ROOT/build/image"
PYTHON="${PYTHON:-python3}"

# Limits a container may have here: podman's defaults (nofile 1048576, a large nproc) fail
# on hosts without CAP_SYS_RESOURCE whose hard limits are lower ("error setting rlimit ...
# operation not permitted"). And runc on hybrid cgroup hosts, where crun refuses to start
# ("cgroups in hybrid mode not supported").
if [ -z "${CONTAINERS_CONF:-}" ]; then
    mkdir -p "$WORK"
    CONTAINERS_CONF="$WORK/containers.conf"
    nofile="$(ulimit -Hn)"; nproc="$(ulimit -Hu)"
    [ "$nofile" = unlimited ] || [ "$nofile" -gt 65536 ] && nofile=65536
    [ "$nproc" = unlimited ] || [ "$nproc" -gt 4096 ] && nproc=4096
    {
        echo "[containers]"
        echo "default_ulimits = [\"nofile=1024:$nofile\", \"nproc=$nproc:$nproc\"]"
        if [ -d /sys/fs/cgroup/unified ]; then
            # Without runc, buildah's first RUN fails with crun's "did not get container
            # create message from subprocess: EOF", after the base images were made.
            command -v runc >/dev/null || {
                echo "build.sh: this host mounts cgroups in hybrid mode, which crun refuses;" \
                    "install runc (Debian: apt-get install runc)" >&2
                exit 1
            }
            printf '[engine]\nruntime = "runc"\n'
        fi
    } > "$CONTAINERS_CONF"
    export CONTAINERS_CONF
fi

# base: a Debian rootfs as an image (minbase: Essential packages and apt only; no docs,
# man pages or locales). $1 image name, then extra packages.
debian_image() {
    local image="$1"; shift
    if podman image exists "$image"; then return; fi
    local include; include="$(IFS=,; echo "python3,ca-certificates,$*")"
    echo "== base image $image from Debian $SUITE packages (mmdebstrap: ${include%,})"
    mkdir -p "$WORK"
    mmdebstrap --variant=minbase --include="${include%,}" \
        --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/doc/*' \
        --dpkgopt='path-include=/usr/share/doc/*/copyright' \
        --dpkgopt='path-exclude=/usr/share/locale/*' \
        --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*' \
        "$SUITE" "$WORK/base.tar" "$MIRROR"
    podman import --change 'CMD ["python3"]' "$WORK/base.tar" "$image"
    rm -f "$WORK/base.tar"
}
if [ -z "${BASE_IMAGE:-}" ]; then
    BASE_IMAGE="localhost/capwatch-base:$SUITE"
    debian_image "$BASE_IMAGE"
fi
if [ -z "${BUILDER_IMAGE:-}" ]; then
    # The same Python as the base, plus binutils to strip Fast Downward's binary, and a C
    # compiler and the Python headers for the compiled hot path. (The tag names the
    # packages: a builder image made before they were added is not reused.)
    BUILDER_IMAGE="localhost/capwatch-builder:$SUITE-cc"
    debian_image "$BUILDER_IMAGE" binutils gcc python3-dev
fi

echo "== wheelhouse"
rm -rf "$WORK/context" && mkdir -p "$WORK/context/wheelhouse"
EXTRAS="${EXTRAS-otel}"
"$PYTHON" -m pip wheel -q --wheel-dir "$WORK/context/wheelhouse" \
    "$ROOT${EXTRAS:+[$EXTRAS]}" pip
# The compiler and what its mypy must see beyond the runtime's packages, as `make
# typecheck` sees them (mypyc refuses what its mypy refuses): mypy, the YAML stubs and the
# optional confluent-kafka client, at the versions of $PYTHON's environment when it has
# them (the project's venv), else the newest.
pinned() {
    local version
    version="$("$PYTHON" -c 'import importlib.metadata as m, sys; print(m.version(sys.argv[1]))' \
        "$1" 2>/dev/null || true)"
    echo "$1${version:+==$version}"
}
mkdir -p "$WORK/context/buildtools"
"$PYTHON" -m pip wheel -q --wheel-dir "$WORK/context/buildtools" \
    "$(pinned mypy)" "$(pinned types-PyYAML)" "$(pinned confluent-kafka)" "setuptools>=77"
# The sources the wheel is built from, without what a local build left beside them (its
# extension modules and manifest would be another Python's).
mkdir -p "$WORK/context/src"
tar -C "$ROOT" --exclude='*.so' --exclude=native.json --exclude=__pycache__ \
    -cf - pyproject.toml setup.py README.md capwatch | tar -C "$WORK/context/src" -xf -

echo "== buildah bud -> $IMAGE"
buildah bud --layers --pull=never --build-arg "BASE_IMAGE=$BASE_IMAGE" \
    --build-arg "BUILDER_IMAGE=$BUILDER_IMAGE" --build-arg "EXTRAS=$EXTRAS" \
    --build-arg "VERSION=$VERSION" -f "$ROOT/Dockerfile" -t "$IMAGE" "$WORK/context"
podman image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E "capwatch" || true

if [ "${SKIP_SMOKE:-0}" != 1 ]; then
    "$ROOT/deploy/image/smoke.sh" "$IMAGE"
fi
