#!/bin/bash
# Tests ps-server-entrypoint with a fake server: its exit code passes through,
# SIGTERM reaches the server, a finished shard idles instead of exiting (and
# stays idle when started again), and the probe.
set -uo pipefail

entry="$TEST_SRCDIR/$TEST_WORKSPACE/deploy/docker/ps-server-entrypoint"
tmp="$(mktemp -d "${TEST_TMPDIR:-/tmp}/entry.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# The fake server: records that it ran, then exits with $FAKE_EXIT, or on
# SIGTERM with 143.
cat >"$tmp/fake_server" <<'FAKE'
#!/bin/bash
echo "$*" >>"$FAKE_RAN"
trap 'exit 143' TERM
if [[ "$FAKE_EXIT" == wait ]]; then
  while :; do sleep 1 & wait $!; done
fi
exit "$FAKE_EXIT"
FAKE
chmod +x "$tmp/fake_server"
export PS_SERVER_BINARY="$tmp/fake_server" FAKE_RAN="$tmp/ran"

# Waits (bounded, not timed: 600 polls) until a file exists.
await_file() {
  for _ in $(seq 600); do
    [[ -e "$1" ]] && return 0
    sleep 0.1
  done
  return 1
}

reset() { rm -f "$tmp/ran" "$tmp/ckpt/done"; }

# A failure passes through and marks nothing done.
reset
PS_SERVER_DONE_FILE="$tmp/ckpt/done" FAKE_EXIT=3 "$entry" --port=7000
rc=$?
((rc == 3)) || fail "exit 3 of the server became $rc"
[[ -e "$tmp/ckpt/done" ]] && fail "a failed server marked its shard done"
grep -qx -- "--port=7000" "$tmp/ran" || fail "the server did not get the arguments"

# SIGTERM reaches the server; its 143 passes through.
reset
PS_SERVER_DONE_FILE="$tmp/ckpt/done" FAKE_EXIT=wait "$entry" &
pid=$!
await_file "$tmp/ran" || fail "the server never started"
kill -TERM "$pid"
wait "$pid"
rc=$?
((rc == 143)) || fail "a server stopped by SIGTERM: exit $rc, expected 143"
[[ -e "$tmp/ckpt/done" ]] && fail "a stopped server marked its shard done"

# Done (exit 0): the file is written and the entrypoint stays up until SIGTERM.
reset
PS_SERVER_DONE_FILE="$tmp/ckpt/done" FAKE_EXIT=0 "$entry" &
pid=$!
await_file "$tmp/ckpt/done" || fail "a finished server did not mark its shard done"
kill -0 "$pid" 2>/dev/null || fail "the entrypoint exited after the server finished"
kill -TERM "$pid"
wait "$pid"
rc=$?
((rc == 0)) || fail "an idle finished shard: exit $rc on SIGTERM, expected 0"

# Started again on a finished shard: the server is not run.
rm -f "$tmp/ran"
PS_SERVER_DONE_FILE="$tmp/ckpt/done" FAKE_EXIT=2 "$entry" &
pid=$!
sleep 0.2
kill -TERM "$pid"
wait "$pid"
rc=$?
((rc == 0)) || fail "a restarted finished shard: exit $rc, expected 0"
[[ -e "$tmp/ran" ]] && fail "a restarted finished shard ran the server again"

# The probe: done passes; otherwise a TCP listener decides.
PS_SERVER_DONE_FILE="$tmp/ckpt/done" "$entry" --probe 1 || fail "probe of a done shard failed"
rm -f "$tmp/ckpt/done"
PS_SERVER_DONE_FILE="$tmp/ckpt/done" "$entry" --probe 1 2>/dev/null &&
  fail "probe passed with nothing listening"
python3 - "$tmp/port" <<'PY' &
import socket, sys
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(4)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(s.getsockname()[1]))
import os
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
s.accept()
PY
listener=$!
if await_file "$tmp/port"; then
  PS_SERVER_DONE_FILE="$tmp/ckpt/done" "$entry" --probe "$(cat "$tmp/port")" ||
    fail "probe failed against a listening port"
else
  fail "the test's listener did not start"
fi
kill "$listener" 2>/dev/null
wait "$listener" 2>/dev/null

# Without the done file's name, nothing runs.
unset PS_SERVER_DONE_FILE
rm -f "$tmp/ran"
"$entry" 2>/dev/null
rc=$?
((rc == 2)) || fail "without \$PS_SERVER_DONE_FILE: exit $rc, expected 2"
[[ -e "$tmp/ran" ]] && fail "the server ran without \$PS_SERVER_DONE_FILE"

if ((failures)); then
  echo "$failures failure(s)"
  exit 1
fi
echo "ok"
