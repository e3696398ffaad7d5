# Sourced by the build scripts of hack/e2e. Every build step announces what
# it builds, sends the tools' output to one log file, and says how long it
# took; a failing step prints the end of the log and where the whole is.
# Progress goes to stderr: the scripts print only their result on stdout.
#
# Env: FPGA_DRA_CACHE (default ~/.cache/fpga-dra-driver) holds sources,
#      binaries and the log (FPGA_DRA_BUILD_LOG, default $CACHE/build.log).

CACHE="${FPGA_DRA_CACHE:-${HOME}/.cache/fpga-dra-driver}"
BUILD_LOG="${FPGA_DRA_BUILD_LOG:-${CACHE}/build.log}"
mkdir -p "${CACHE}" "$(dirname "${BUILD_LOG}")"

say() { printf '[build %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# duration SECONDS prints "7m48s" or "12s".
duration() {
  if [ "$1" -ge 60 ]; then printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); else printf '%ds' "$1"; fi
}

# step WHAT COMMAND...: announces WHAT, runs COMMAND (a function or a
# program) with its output appended to the build log, and reports the time
# it took. On failure it shows the log's last lines and exits. A hint in
# parentheses at the end of WHAT is not repeated in the closing line.
step() {
  local what="$1" start=${SECONDS}
  shift
  say "${what} ..."
  printf '\n=== %s %s\n' "$(date '+%F %T')" "${what}" >>"${BUILD_LOG}"
  # A subshell with errexit of its own: in an `if` condition bash would
  # ignore a failure in the middle of a function.
  local rc=0
  set +o errexit
  (
    set -o errexit -o nounset -o pipefail
    "$@"
  ) >>"${BUILD_LOG}" 2>&1
  rc=$?
  set -o errexit
  if [ "${rc}" -ne 0 ]; then
    say "${what%% (*}: FAILED after $(duration $((SECONDS - start))); the end of ${BUILD_LOG}:"
    tail -n 25 "${BUILD_LOG}" | sed 's/^/    /' >&2
    exit 1
  fi
  say "${what%% (*}: done in $(duration $((SECONDS - start)))"
}

# apt_install PACKAGE...: installs Debian packages quietly (output in the
# log).
apt_install() {
  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@"
}
