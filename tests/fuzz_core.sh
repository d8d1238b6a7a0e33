#!/usr/bin/env bash
# Run each cargo-fuzz target of the native core (core/fuzz) for SECONDS (default 45),
# starting from a corpus of the repo's samples (the figures target: their request and
# response frames, and the schema as JSON, both written by Python from the repo's
# analyzer and dissectors). A crash fails the run; its input is
# left in core/fuzz/artifacts/ to become a unit test. cargo-fuzz is installed from
# crates.io on first use; it needs nightly features, which RUSTC_BOOTSTRAP enables on
# the stable toolchain. KWS_FUZZ_TARGETS="figures pair" runs only those targets.
set -euo pipefail
cd "$(dirname "$0")/../core"
seconds="${1:-45}"
if ! command -v cargo-fuzz >/dev/null 2>&1; then
  echo "installing cargo-fuzz (once)"
  cargo install -q --locked cargo-fuzz
fi
export RUSTC_BOOTSTRAP=1
schema="$(mktemp --suffix=.json)"
trap 'rm -f "$schema"' EXIT
PYTHONPATH=.. python3 ../tests/schema_json.py "$schema"
export KWS_FIGURES_SCHEMA="$schema"
for target in ${KWS_FUZZ_TARGETS:-capture stream frame pair figures}; do
  corpus="$(mktemp -d)"
  if [ "$target" = figures ]; then
    PYTHONPATH=.. python3 ../tests/figures_corpus.py "$corpus" ../samples/*.pcap ../samples/*.pcapng >/dev/null
  else
    cp ../samples/*.pcap ../samples/*.pcapng "$corpus"/
  fi
  log="$(mktemp)"
  status=0
  cargo fuzz run -s none "$target" "$corpus" -- -max_total_time="$seconds" -max_len=65536 \
      -rss_limit_mb=2048 >"$log" 2>&1 || status=$?
  rm -rf "$corpus"
  if [ "$status" -ne 0 ]; then
    tail -30 "$log" >&2
    echo "fuzz target $target failed (exit $status); a crashing input is in core/fuzz/artifacts/$target/" >&2
    exit 1
  fi
  echo "fuzz target $target: $(grep -E '^Done [0-9]+ runs' "$log" || tail -1 "$log")"
  rm -f "$log"
done
