#!/usr/bin/env bash
# pip install with retries: a fresh venv downloads torch (a CUDA build of several GB from PyPI), and one dropped
# connection must not fail `make test`. Each attempt resumes interrupted downloads (pip >= 25.1 reads
# PIP_RESUME_RETRIES; older pips ignore it); whole attempts are repeated with a growing pause.
# Usage: tools/pip_install.sh PYTHON PIP-INSTALL-ARGS...
py=$1; shift
attempts=${PIP_INSTALL_ATTEMPTS:-4}
export PIP_RESUME_RETRIES=${PIP_RESUME_RETRIES:-20}
for ((i = 1; i <= attempts; i++)); do
  "$py" -m pip install "$@" && exit 0
  rc=$?
  if ((i < attempts)); then
    echo "pip install failed (rc $rc), attempt $i of $attempts; retrying in $((15 * i)) s" >&2
    sleep $((15 * i))
  fi
done
echo "pip install failed $attempts times (last rc $rc): check the network or install by hand" >&2
exit "$rc"
