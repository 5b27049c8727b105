#!/usr/bin/env bash
# Install what is missing: Debian packages, the .venv with pinned packages, hotpath itself.
# Idempotent: a second run with unchanged requirement files takes about a second.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
APT_PACKAGES=(libb64-0d prometheus nginx libnginx-mod-http-lua lua-cjson redis-server lua-nginx-redis)   # perf_analyzer links libb64.so.0d; prometheus + promtool: monitoring/; nginx: local replicas; its Lua module + cjson: the gateway's checks (hotpath/gateway/front_door.lua); tcmalloc: preloaded into vLLM's engine (hotpath/runtime/llm); redis-server + lua-nginx-redis (Debian's lua-resty-redis): shared quotas and cache (hotpath/shared_state/)

say() { echo "[setup] $*"; }

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
# Node.js >= 20 with npm: node-llama-cpp (llama.cpp, the anchor of text_generation's precision gate in the
# build: hotpath/exporters/node_llama_cpp.py). Debian 12's nodejs is 18, too old: the machine's own is used.
node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if [ "$node_major" -lt 20 ] || ! command -v npm >/dev/null; then
  echo "[setup] Node.js >= 20 with npm is needed (text_generation's precision gate runs llama.cpp through" \
       "node-llama-cpp); found: $(node --version 2>/dev/null || echo none). Install it (e.g. NodeSource's nodejs 20)." >&2
  exit 1
fi
# apt's package lists are also the retrieval endpoint's corpus (`apt-cache dumpavail`): images often ship
# without them.
if ((${#missing[@]})) || ! compgen -G "/var/lib/apt/lists/*_Packages*" >/dev/null; then
  say "apt-get update"
  $SUDO apt-get update -qq
fi
if ((${#missing[@]})); then
  say "apt-get install ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}
if [ ! -x "$VENV/bin/python" ]; then
  say "creating $VENV with $($PYTHON --version)"
  "$PYTHON" -m venv "$VENV"
fi

stamp_file="$VENV/.hotpath-setup"
stamp=$(cat requirements.txt requirements-nodeps.txt constraints.txt pyproject.toml | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp_file" 2>/dev/null)" != "$stamp" ]; then
  say "installing pinned requirements into $VENV (first run: a few minutes)"
  "$VENV/bin/python" -m pip install -q --upgrade "pip>=24"
  "$VENV/bin/python" -m pip install -q -r requirements.txt -c constraints.txt
  "$VENV/bin/python" -m pip install -q --no-deps -r requirements-nodeps.txt
  "$VENV/bin/python" -m pip install -q --no-deps --no-build-isolation -e .
  echo "$stamp" > "$stamp_file"
else
  say "$VENV is up to date"
fi

# side_venv DIR REQUIREMENTS WHAT [COMMAND...]: a venv of its own for packages whose pins conflict with .venv's,
# reinstalled when REQUIREMENTS changes; COMMAND (run with the venv's python) follows each install.
side_venv() {
  local dir=$1 requirements=$2 what=$3
  shift 3
  if [ ! -x "$dir/bin/python" ]; then
    say "creating $dir with $($PYTHON --version)"
    "$PYTHON" -m venv "$dir"
  fi
  local stamp
  stamp=$(sha256sum "$requirements" | cut -d' ' -f1)
  if [ "$(cat "$dir/.hotpath-setup" 2>/dev/null)" != "$stamp" ]; then
    say "installing $what ($requirements) into $dir"
    "$dir/bin/python" -m pip install -q --upgrade "pip>=24"
    "$dir/bin/python" -m pip install -q -r "$requirements"
    if (($#)); then "$dir/bin/python" "$@"; fi
    echo "$stamp" > "$dir/.hotpath-setup"
  else
    say "$dir is up to date"
  fi
}

# text_generation's engine: vLLM's CPU build in an environment of its own (its numpy 2 / protobuf 7 pins
# conflict with nvidia-pytriton and tritonclient). pip pulls CUDA builds of torchvision, torchaudio and
# torchcodec that fail to import; a text-only model needs none of them.
side_venv "${VLLM_VENV:-.venv-vllm}" requirements-vllm.txt "vLLM (first run: about 6 minutes)" \
  -m pip uninstall -q -y torchvision torchaudio torchcodec
# tests: LiteLLM (tests/integration/test_openai_tools.py): litellm 1.110 needs importlib-metadata < 9, which
# .venv's constraints pin at 10.2.
side_venv "${LITELLM_VENV:-.venv-litellm}" requirements-litellm.txt "LiteLLM"
