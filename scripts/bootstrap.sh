#!/usr/bin/env bash
# Idempotent bootstrap: system packages, .venv, the project installed in it.
# Safe to run any number of times; does nothing that is already done.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
[ -f /usr/share/java/zookeeper.jar ] || missing+=(zookeeper)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v git >/dev/null 2>&1 || missing+=(git)
command -v java >/dev/null 2>&1 || missing+=(default-jre-headless)
# the tests run a PostgreSQL server of their own (and stop it: tests/fixtures/postgres.py)
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || missing+=(postgresql)
# headless Chromium: the tests take screenshots of Flower's pages (tests/e2e/test_flower.py)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
# jobs in a sandbox (executor.sandbox: bwrap) and its tests
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
# network namespaces for the several-hosts test (make test-hosts; git daemon is git's)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
# nodes: a local node runs its own sshd, and Ansible reaches nodes over SSH
# (ssh, ssh-agent, ssh-keygen; docs/nodes.md)
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
command -v ssh-agent >/dev/null 2>&1 || missing+=(openssh-client)
# .venv from the distribution's Python (below) needs its venv module
if [ -z "${PYTHON:-}" ] && [ "$(command -v python3 || true)" = /usr/bin/python3 ] \
    && ! /usr/bin/python3 -c 'import ensurepip' >/dev/null 2>&1; then
    missing+=(python3-venv)
fi

if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "bootstrap: installing system packages: ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y -q "${missing[@]}" >/dev/null 2>&1 || {
            apt-get update -q >/dev/null
            apt-get install -y -q "${missing[@]}" >/dev/null
        }
    else
        echo "bootstrap: missing system packages: ${missing[*]}" >&2
        echo "bootstrap: run this, then try again:" >&2
        echo "    sudo apt-get install -y ${missing[*]}" >&2
        exit 1
    fi
fi

# The interpreter of .venv: $PYTHON when set; else the distribution's python3
# when it is 3.11 or newer and can make a virtualenv (Debian builds it with
# PGO and LTO: Sluice's workers spend 10-15 % less CPU on it than on a
# default pyenv build, docs/performance.md); else python3 on the PATH.
# An existing .venv is kept: remove it to change interpreters.
system_python=/usr/bin/python3
if [ -n "${PYTHON:-}" ]; then
    python=$PYTHON
elif [ -x "$system_python" ] && "$system_python" -c '
import sys
import ensurepip  # Debian: the python3-venv package
sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1; then
    python=$system_python
else
    python=python3
fi
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "bootstrap: Python >= 3.11 is needed ($python is $("$python" --version 2>&1))" >&2
    exit 1
fi
[ -x .venv/bin/python ] || "$python" -m venv .venv

# Reinstall only when the project metadata changed since the last install.
stamp=".venv/.sluice-installed-$(sha256sum pyproject.toml | cut -c1-16)"
if [ ! -f "$stamp" ]; then
    echo "bootstrap: installing the project into .venv"
    log=.venv/pip-install.log
    if ! { .venv/bin/python -m pip install -q --upgrade pip \
           && .venv/bin/python -m pip install -q -e '.[dev]' --config-settings editable_mode=compat; } >"$log" 2>&1; then
        tail -n 30 "$log" >&2
        echo "bootstrap: pip install failed; the full log is $log" >&2
        exit 1
    fi
    rm -f .venv/.sluice-installed-*
    touch "$stamp"
fi
