#!/usr/bin/env bash
# Prepare, on a machine that reaches the package index, the wheels an offline GPU machine lacks to run
# zerotune's bench, calibrate and the GPU acceptance run (docs/gpu.md):
#
#   DeepSpeed as a pure-Python wheel (DS_BUILD_OPS=0: its CUDA/C++ ops, CPU Adam included, are
#   JIT-compiled on the GPU machine at first use, against that machine's torch and CUDA), hjson,
#   pydantic with the exact pydantic-core its metadata pins, annotated-types, typing-inspection,
#   typing_extensions, and zerotune itself.
#
# usage: scripts/gpu_wheels.sh [WHEELDIR]        download/build into WHEELDIR (default dist/gpu-wheels)
#        scripts/gpu_wheels.sh --verify WHEELDIR  offline check only: the set installs for the target
#
# Environment (defaults in brackets):
#   TARGET_PYTHON [3.12]        the GPU machine's Python (major.minor)
#   PLATFORMS [manylinux_2_28_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64]
#   DEEPSPEED_VERSION [0.19.8]  within zerotune's pin (pyproject: deepspeed>=0.19,<0.20)
#   PYDANTIC_SPEC [pydantic>=2.6,<3]
#   TORCH_PYTHON [python3]      a Python with torch installed: DeepSpeed's setup.py imports torch
#   EXTRA_PACKAGES []           more requirements an offline cluster lacks, e.g. "typer rich pyyaml"
#   VERIFY_PYTHON [python3]     imports are tried with it when it is the target's version
#
# On the GPU machine:  pip install --no-index --find-links WHEELDIR 'zerotune[bench]'
# or without touching its site-packages:
#   python3 -m pip install --no-index --no-deps --target DIR WHEELDIR/*.whl && export PYTHONPATH=DIR
#
# Idempotent: a wheel already in WHEELDIR is not downloaded or built again (delete it to refresh).
# Exit status: 0 the set is complete and installs, 1 it does not, 2 usage.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TARGET_PYTHON="${TARGET_PYTHON:-3.12}"
PLATFORMS="${PLATFORMS:-manylinux_2_28_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64}"
DEEPSPEED_VERSION="${DEEPSPEED_VERSION:-0.19.8}"
PYDANTIC_SPEC="${PYDANTIC_SPEC:-pydantic>=2.6,<3}"
TORCH_PYTHON="${TORCH_PYTHON:-python3}"
EXTRA_PACKAGES="${EXTRA_PACKAGES:-}"
VERIFY_PYTHON="${VERIFY_PYTHON:-python3}"
PIP=(python3 -m pip)
# the distributions the GPU image lacks (checked by --verify), as wheel file-name prefixes
REQUIRED=(deepspeed hjson pydantic pydantic_core annotated_types typing_inspection typing_extensions zerotune)

die() { echo "error: $*" >&2; exit "${2:-1}"; }

target_flags() {
  local flags=(--python-version "$TARGET_PYTHON" --implementation cp --only-binary=:all:)
  local p
  for p in $PLATFORMS; do flags+=(--platform "$p"); done
  printf '%s\n' "${flags[@]}"
}

have_wheel() {  # have_wheel DIR NAME: a wheel of distribution NAME (normalised, _ for -) is in DIR
  compgen -G "$1/$2-[0-9]*.whl" > /dev/null
}

metadata_requires() {  # the Requires-Dist lines (no extras) of wheel $1, one requirement per line
  python3 - "$1" <<'EOF'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    for line in wheel.read(name).decode().splitlines():
        if line.startswith("Requires-Dist:") and "extra ==" not in line:
            print(line.split(":", 1)[1].split(";")[0].strip().replace(" ", ""))
EOF
}

verify() {  # verify WHEELDIR: every required wheel is there and the set installs for the target
  local dir="$1" missing=() name
  [[ -d "$dir" ]] || die "$dir is not a folder" 2
  for name in "${REQUIRED[@]}"; do have_wheel "$dir" "$name" || missing+=("$name"); done
  if ((${#missing[@]})); then
    echo "missing wheels in $dir: ${missing[*]}" >&2
    return 1
  fi
  # pydantic-core must be exactly the version pydantic pins (they are released in lockstep)
  local pyd core pinned
  pyd="$(ls "$dir"/pydantic-[0-9]*.whl | head -n1)"
  pinned="$(metadata_requires "$pyd" | sed -n 's/^pydantic-core==//p')"
  core="$(basename "$(ls "$dir"/pydantic_core-[0-9]*.whl | head -n1)" | cut -d- -f2)"
  [[ -z "$pinned" || "$pinned" == "$core" ]] || { echo "pydantic needs pydantic-core==$pinned, $dir has $core" >&2; return 1; }
  local scratch
  scratch="$(mktemp -d)"
  # shellcheck disable=SC2064  # expand now: the trap must remove this run's folder
  trap "rm -rf '$scratch'" RETURN
  local flags
  mapfile -t flags < <(target_flags)
  if ! "${PIP[@]}" install --quiet --no-index --no-deps --target "$scratch" "${flags[@]}" "$dir"/*.whl; then
    echo "the wheels in $dir do not install for CPython $TARGET_PYTHON ($PLATFORMS)" >&2
    return 1
  fi
  for name in "${REQUIRED[@]}"; do
    compgen -G "$scratch/$name-*.dist-info" > /dev/null || { echo "$name did not install" >&2; return 1; }
  done
  if [[ "$("$VERIFY_PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')" == "$TARGET_PYTHON" ]]; then
    # deepspeed is not imported: it needs torch, which the GPU machine has and this one may not
    PYTHONPATH="$scratch" "$VERIFY_PYTHON" -c "import hjson, pydantic, pydantic_core, zerotune.dsconfig.schema
print('imports ok with', __import__('sys').version.split()[0], '- pydantic', pydantic.VERSION)" \
      || { echo "the installed set does not import under $VERIFY_PYTHON" >&2; return 1; }
  else
    echo "installed for CPython $TARGET_PYTHON into a scratch --target ($VERIFY_PYTHON is not $TARGET_PYTHON: imports not tried)"
  fi
  ls -l "$dir"/*.whl | awk '{printf "  %8.0f kB  %s\n", $5 / 1e3, $9}'
  echo "ok: $(ls "$dir"/*.whl | wc -l) wheels in $dir install for CPython $TARGET_PYTHON"
}

if [[ "${1:-}" == "--verify" ]]; then
  [[ $# -eq 2 ]] || die "usage: $0 --verify WHEELDIR" 2
  verify "$2"
  exit $?
fi
[[ $# -le 1 && "${1:-}" != -* ]] || die "usage: $0 [WHEELDIR] | --verify WHEELDIR" 2
WHEELDIR="$(mkdir -p "${1:-$REPO/dist/gpu-wheels}" && cd "${1:-$REPO/dist/gpu-wheels}" && pwd)"
mapfile -t FLAGS < <(target_flags)

# 1. pydantic, then exactly what its metadata asks for (pydantic-core ==, the rest >=), and hjson
"${PIP[@]}" download --quiet --no-deps "${FLAGS[@]}" -d "$WHEELDIR" "$PYDANTIC_SPEC" hjson
PYDANTIC_WHEEL="$(ls -t "$WHEELDIR"/pydantic-[0-9]*.whl | head -n1)"
mapfile -t PYDANTIC_DEPS < <(metadata_requires "$PYDANTIC_WHEEL")
"${PIP[@]}" download --quiet --no-deps "${FLAGS[@]}" -d "$WHEELDIR" "${PYDANTIC_DEPS[@]}"
if [[ -n "$EXTRA_PACKAGES" ]]; then
  # shellcheck disable=SC2086  # a space-separated list of requirements
  "${PIP[@]}" download --quiet "${FLAGS[@]}" -d "$WHEELDIR" $EXTRA_PACKAGES
fi

# 2. DeepSpeed from its sdist, ops not prebuilt; setup.py imports torch, so no build isolation
if ! have_wheel "$WHEELDIR" deepspeed; then
  "$TORCH_PYTHON" -c "import torch" 2> /dev/null \
    || die "TORCH_PYTHON=$TORCH_PYTHON cannot import torch (DeepSpeed's setup.py needs it)" 2
  SRC="$(mktemp -d)"
  trap 'rm -rf "$SRC"' EXIT
  "${PIP[@]}" download --quiet --no-deps --no-binary=:all: "deepspeed==$DEEPSPEED_VERSION" -d "$SRC"
  DS_BUILD_OPS=0 "$TORCH_PYTHON" -m pip wheel --quiet --no-deps --no-build-isolation -w "$WHEELDIR" \
    "$SRC/deepspeed-$DEEPSPEED_VERSION.tar.gz"
fi

# 3. zerotune itself (its wheel carries the model and hardware catalogs)
rm -f "$WHEELDIR"/zerotune-*.whl  # always this checkout's code, not an older build
"${PIP[@]}" wheel --quiet --no-deps -w "$WHEELDIR" "$REPO"

verify "$WHEELDIR"
