#!/usr/bin/env bash
# The fresh-machine check: run CI exactly as a new user's machine would, with every cache empty.
#
#   nice -n 10 bash hack/cold-check.sh [--rev REV] [--shared PATH] [--keep] [--log FILE]
#
# Clones the repository (HEAD, or REV) into a new temporary folder, puts `shared/` beside the clone (as CI
# does), and runs `CI=true bash .ci/run` there with HOME, XDG_CACHE_HOME, the project's binary cache
# (POOLPILOT_CACHE), Go's module and build caches (GOMODCACHE, GOCACHE, GOPATH) and pip's cache
# (PIP_CACHE_DIR) all pointed at new empty folders inside it: every download and every build happens again.
# Prints the elapsed time of each phase (the `==>` lines of hack/setup.sh and hack/test.sh) and the total,
# and exits with .ci/run's exit code. The temporary folder is removed unless --keep.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
rev=HEAD
shared="$repo/../shared"
keep=0
log=""
while (( $# )); do
  case "$1" in
    --rev) rev="$2"; shift 2 ;;
    --shared) shared="$2"; shift 2 ;;
    --keep) keep=1; shift ;;
    --log) log="$2"; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "cold-check: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [[ ! -d "$shared" ]]; then
  echo "cold-check: $shared is not a folder; pass --shared PATH (CI puts shared/ beside the clone)" >&2
  exit 2
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/poolpilot-cold.XXXXXX")"
# shellcheck disable=SC2329  # invoked by the EXIT trap
cleanup() {
  if (( keep )); then
    echo "cold-check: kept $work"
  else
    chmod -R u+w "$work" 2>/dev/null || true   # Go's module cache is read-only
    rm -rf "$work"
  fi
}
trap cleanup EXIT

git clone -q "$repo" "$work/main"
git -C "$work/main" checkout -q "$rev"
cp -r "$shared" "$work/shared"
mkdir -p "$work/home" "$work/cache" "$work/go/mod" "$work/go/build" "$work/go/path" "$work/pip"

echo "cold-check: $(git -C "$work/main" rev-parse --short HEAD) in $work, every cache empty"
start=$(date +%s)
phase_start=$start
phase="clone"
status=0
run_ci() {
  cd "$work/main"
  env HOME="$work/home" \
      XDG_CACHE_HOME="$work/cache" \
      POOLPILOT_CACHE="$work/cache/poolpilot" \
      GOMODCACHE="$work/go/mod" GOCACHE="$work/go/build" GOPATH="$work/go/path" \
      PIP_CACHE_DIR="$work/pip" \
      CI=true \
      bash .ci/run 2>&1
}
timings=()
while IFS= read -r line; do
  if [[ -n "$log" ]]; then printf '%s\n' "$line" >> "$log"; fi
  printf '%s\n' "$line"
  if [[ "$line" == "==> "* ]]; then
    now=$(date +%s)
    timings+=("$(printf '%6d s  %s' $(( now - phase_start )) "$phase")")
    phase="${line#==> }"
    phase_start=$now
  fi
done < <(rc=0; run_ci || rc=$?; echo "==> exit $rc")
end=$(date +%s)
exit_line="${phase#exit }"
[[ "$exit_line" =~ ^[0-9]+$ ]] && status=$exit_line

echo
echo "cold-check: phases (elapsed until the next phase began)"
printf '%s\n' "${timings[@]}"
echo "cold-check: total $(( end - start )) s ($(( (end - start) / 60 )) min), .ci/run exit $status"
exit "$status"
