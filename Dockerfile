# capwatch container image. Build it with `make image` (deploy/image/build.sh), which
# prepares the build context: a wheelhouse of capwatch and every dependency, built on the
# host, so the build itself needs no network (and no registry when BASE_IMAGE is local).
#
#   BASE_IMAGE     the runtime: any Debian-like image with python3 >= 3.11.
#   BUILDER_IMAGE  the same Python at the same path (the virtual environment built there
#                  runs in BASE_IMAGE), plus binutils, a C compiler and the Python headers
#                  (Debian: gcc, python3-dev).
# build.sh makes both from Debian packages with mmdebstrap; on a machine that can pull,
# the defaults below (the official Python images) work as well.
ARG BASE_IMAGE=docker.io/library/python:3.11.11-slim-bookworm
ARG BUILDER_IMAGE=docker.io/library/python:3.11.11-bookworm

FROM ${BUILDER_IMAGE} AS builder
# The daemon's optional parts the image carries: otel (OTLP trace ingest). The wheelhouse
# must hold them (build.sh builds it for the same extras).
ARG EXTRAS=otel
COPY wheelhouse/ /wheelhouse/
COPY buildtools/ /buildtools/
COPY src/ /src/
# --without-pip: Debian ships ensurepip separately (python3-venv); pip is run from its
# wheel instead, and never lands in the runtime image.
# The hot path is compiled (mypyc; capwatch/native.py, docs/performance.md "Compiled
# modules") against this very Python, in a throw-away venv holding the compiler (and what
# else `make typecheck` sees: the YAML stubs, the optional confluent-kafka), whose
# mypy sees the runtime venv's packages (their types) through a .pth file; the runtime
# venv's pure capwatch is then replaced by the compiled wheel, and the build fails unless
# the installed package runs its hot path compiled.
# The planner binary ships with debug information (220 MB; 4 MB stripped).
RUN python3 -m venv --without-pip /opt/capwatch \
 && pip_wheel="$(ls /wheelhouse/pip-*.whl)" \
 && /opt/capwatch/bin/python "$pip_wheel/pip" install --no-index --find-links /wheelhouse \
      --no-cache-dir --disable-pip-version-check "capwatch${EXTRAS:+[$EXTRAS]}" \
 && python3 -m venv --without-pip /build \
 && /build/bin/python "$pip_wheel/pip" install --no-index --find-links /buildtools \
      --no-cache-dir --disable-pip-version-check mypy types-PyYAML confluent-kafka setuptools \
 && purelib='import sysconfig; print(sysconfig.get_paths()["purelib"])' \
 && /opt/capwatch/bin/python -c "$purelib" \
      > "$(/build/bin/python -c "$purelib")/capwatch-runtime.pth" \
 && cd /src \
 && CAPWATCH_COMPILE=1 /build/bin/python "$pip_wheel/pip" wheel --no-index --no-deps \
      --no-build-isolation --no-cache-dir --disable-pip-version-check --wheel-dir /dist . \
 && /opt/capwatch/bin/python "$pip_wheel/pip" install --no-index --no-deps \
      --force-reinstall --no-cache-dir --disable-pip-version-check /dist/capwatch-*.whl \
 && cd / && rm -rf /build /dist /src \
 && /opt/capwatch/bin/python -c "from capwatch.adapters.io.fast_downward import driver_path; print(driver_path())" \
 && find /opt/capwatch \( -path '*/up_fast_downward/*/bin/downward' -o -path '*/site-packages/capwatch/*.so' \) \
      -type f -exec strip --strip-unneeded {} + \
 && /opt/capwatch/bin/python -W error::RuntimeWarning -c \
      "import sys, capwatch.native as n; print(n.describe()); sys.exit(not n.compiled())" \
 && find /opt/capwatch -name tests -type d -path '*/site-packages/*/tests' -prune -exec rm -rf {} + \
 && /opt/capwatch/bin/python -m compileall -q /opt/capwatch/lib

FROM ${BASE_IMAGE}
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="capwatch" \
      org.opencontainers.image.description="Continual capability monitoring for deployed AI agents" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
# A fixed numeric user (the chart's runAsUser) with a passwd entry, so tools that look the
# user up work; /data is the working directory and the SQLite store's default home.
RUN echo 'capwatch:x:10001:10001:capwatch:/data:/usr/sbin/nologin' >> /etc/passwd \
 && echo 'capwatch:x:10001:' >> /etc/group \
 && mkdir -p /data && chown 10001:10001 /data
COPY --from=builder /opt/capwatch /opt/capwatch
ENV PATH=/opt/capwatch/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
USER 10001:10001
WORKDIR /data
EXPOSE 9464
ENTRYPOINT ["capwatch"]
CMD ["--help"]
