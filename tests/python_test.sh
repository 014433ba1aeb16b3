#!/bin/sh
# Runs a pytest file of the Python module's tests on Debian's interpreter
# (/usr/bin/python3, where scripts/install_deps.sh puts torch, NumPy and
# pytest), with the built package (//python:paramserver) on the path.
# The working directory is the test's runfiles tree.
set -eu
export PYTHONPATH="$PWD/python/site:$PWD/tests"
export PYTHONDONTWRITEBYTECODE=1
exec /usr/bin/python3 -m pytest -q -p no:cacheprovider "$@"
