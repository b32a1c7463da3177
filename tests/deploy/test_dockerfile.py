"""The Dockerfile, read statically (building the image is `make image`, too slow for the
suite): multi-stage, pinned base, non-root, Fast Downward installed, and the user the chart
runs as."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())  # join continuation lines
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_multi_stage_with_a_pinned_base() -> None:
    ins = instructions()
    froms = [rest for word, rest in ins if word == "FROM"]
    assert len(froms) >= 2
    args = dict(rest.split("=", 1) for word, rest in ins if word == "ARG" and "=" in rest)
    for f in froms:
        image = f.split()[0]
        image = args.get(image.strip("${}"), image) if image.startswith("$") else image
        assert ":" in image.rsplit("/", 1)[-1] or image == "builder", f"unpinned base {image}"
        assert not image.endswith(":latest"), image
    # The runtime stage copies the built environment, not the sources or the wheelhouse.
    copies = [rest for word, rest in ins if word == "COPY"]
    assert any(c.startswith("--from=builder") for c in copies)
    runtime = ins[max(i for i, (w, _) in enumerate(ins) if w == "FROM"):]
    assert not any(w == "COPY" and "wheelhouse" in r for w, r in runtime)


def test_runs_as_the_non_root_user_the_chart_expects() -> None:
    ins = instructions()
    users = [rest for word, rest in ins if word == "USER"]
    assert users, "no USER: the container would run as root"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0  # numeric: runAsNonRoot can verify it
    values = yaml.safe_load((ROOT / "helm" / "capwatch" / "values.yaml").read_text())
    assert values["podSecurityContext"]["runAsUser"] == int(uid)
    entry = [rest for word, rest in ins if word == "ENTRYPOINT"]
    assert entry and "capwatch" in entry[-1]


def test_fast_downward_is_installed_and_checked_in_the_build() -> None:
    text = DOCKERFILE.read_text()
    assert "fast_downward import driver_path" in text  # the build fails without the planner
    deps = (ROOT / "pyproject.toml").read_text()
    assert "up-fast-downward" in deps


def test_the_build_stage_compiles_the_hot_path_and_checks_it() -> None:
    # The wheel is built in the builder stage without pip's isolated build (mypy must see
    # the dependencies' types), the builder image carries a C compiler and the headers,
    # and the build and the smoke test fail unless the installed package runs compiled.
    ins = instructions()
    builder = ins[:max(i for i, (w, _) in enumerate(ins) if w == "FROM")]
    runs = " ".join(rest for word, rest in builder if word == "RUN")
    assert "CAPWATCH_COMPILE=1" in runs and "--no-build-isolation" in runs
    assert "sys.exit(not n.compiled())" in runs
    build = (ROOT / "deploy" / "image" / "build.sh").read_text()
    assert re.search(r'debian_image "\$BUILDER_IMAGE" .*\bgcc\b.*\bpython3-dev\b', build)
    assert "sys.exit(not n.compiled())" in (ROOT / "deploy" / "image" / "smoke.sh").read_text()
