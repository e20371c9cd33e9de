#!/usr/bin/env bash
# The suites on a GPU host without docker: a virtual environment VENV over an existing CUDA torch environment.
#
#   bash scripts/gpu-host.sh VENV [WHEELS_DIR]
#   source VENV/bin/gpu-env
#   pytest suites -m "functional or streaming or perf" --engines-lock engines.cuda.lock --perf-workload reference-gpu
#
# Why not pip install ".[reference]" there: the python backend stub of the nvidia-pytriton tritonserver (2.51.0)
# needs numpy < 2, and numpy 1.26 cannot go into a CUDA environment built on numpy 2 (transformers' generation
# imports scikit-learn when present, whose scipy then fails on numpy 1: `np.long` AttributeError). So VENV holds
# numpy 1.26.4, nvidia-pytriton, tritonclient and this project, and sees every other package of the CUDA
# environment (torch, transformers, ...) through one .pth file naming a folder of symlinks, leaving out those built
# for numpy 2 only: numpy, scipy, scikit-learn, pandas, jax, numpyro (the suites run without them).
#
# PYTHON (default python3) is the CUDA environment's interpreter. WHEELS_DIR, for hosts without a package index,
# holds the wheels named below (pip download --no-deps them elsewhere for this Python); versions come from
# constraints.txt. Run from the repository root.
set -euo pipefail

venv=${1:?usage: bash scripts/gpu-host.sh VENV [WHEELS_DIR]}
wheels=${2:-}
python=${PYTHON:-python3}
[ -f constraints.txt ] && [ -f pyproject.toml ] || { echo "run from the repository root" >&2; exit 2; }

"$python" - <<'PY' || { echo "$python has no CUDA torch: set PYTHON to the interpreter of your CUDA torch environment" >&2; exit 2; }
import torch
assert torch.cuda.is_available(), "torch.cuda.is_available() is False"
print(f"[gpu-host] torch {torch.__version__} sees {torch.cuda.device_count()} GPU(s): {torch.cuda.get_device_name(0)}")
PY

echo "[gpu-host] creating $venv over $("$python" -c 'import sys; print(sys.prefix)')"
"$python" -m venv --without-pip "$venv"  # pip comes from the CUDA environment, through the .pth below
venv=$(cd "$venv" && pwd)
host_site=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
venv_site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
mkdir -p "$venv/host-packages"
shopt -s nullglob
for entry in "$host_site"/*; do
  name=$(basename "$entry")
  case "${name,,}" in
    numpy*|scipy*|sklearn*|scikit_learn*|pandas*|jax*|numpyro*) continue ;;  # built for numpy 2
    *.pth) continue ;;                                                        # run only in site dirs, not here
    nvidia_pytriton*|pytriton|tritonclient*|pytest_triton_llm*) continue ;;  # installed into VENV below
  esac
  ln -sfn "$entry" "$venv/host-packages/$name"
done
echo "$venv/host-packages" > "$venv_site/host-packages.pth"  # after VENV's own site-packages: its numpy wins

pip_args=(-q --no-deps --disable-pip-version-check -c constraints.txt)
[ -n "$wheels" ] && pip_args+=(--no-index --find-links "$wheels")
echo "[gpu-host] installing numpy<2, nvidia-pytriton (tritonserver 2.51.0), tritonclient, gguf"
"$venv/bin/python" -m pip install "${pip_args[@]}" numpy nvidia-pytriton tritonclient geventhttpclient gevent \
  greenlet zope.event zope.interface python-rapidjson brotli gguf
echo "[gpu-host] installing this project (editable)"
"$venv/bin/python" -m pip install "${pip_args[@]}" --no-build-isolation -e .

libdir=$("$python" -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR"))')
cat > "$venv/bin/gpu-env" <<ENV
# source me: VENV's python and pytest first; libpython (the python backend stub links it) on the loader's path
export PATH="$venv/bin:\$PATH"
export LD_LIBRARY_PATH="$libdir\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
ENV
# shellcheck disable=SC1091
source "$venv/bin/gpu-env"
python - <<'PY'
import importlib.util, pathlib, numpy, torch, pytest_triton_llm
assert numpy.__version__ < "2", numpy.__version__
server = pathlib.Path(importlib.util.find_spec("pytriton").submodule_search_locations[0]) / "tritonserver/bin/tritonserver"
assert server.is_file(), f"{server} is missing"  # the wheel's tritonserver; pytriton itself (zmq ...) is not imported
print(f"[gpu-host] ready: numpy {numpy.__version__}, torch {torch.__version__} on {torch.cuda.get_device_name(0)}; "
      "now: source VENV/bin/gpu-env")
PY
