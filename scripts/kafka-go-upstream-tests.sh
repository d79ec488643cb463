#!/usr/bin/env bash
# kafka-go-upstream-tests.sh - run kafka-go's own tests of the files the billing
# patch touches against the patched copy in third_party/kafka-go, so that an
# edit of the patch that breaks what upstream's tests expect fails `make test`.
#
#   scripts/kafka-go-upstream-tests.sh
#
# The copy holds none of upstream's tests (third_party/kafka-go/PATCHES.md,
# "Checking the patch"). This script takes them from the Go module cache, where
# `go mod verify` checks them against the release's pinned hash, copies
# third_party/kafka-go and those tests into a temporary directory, and runs
# them there with -race. Nothing in the repository is written.
#
# Steps, each of which fails the run:
#   1. fetch kafka-go $VERSION through the module proxy (a no-op when cached)
#      and verify the module cache's copy against SUM;
#   2. compare third_party/kafka-go with it: the files the patch changes and
#      adds must be PATCHED and ADDED below (the choice of tests follows from
#      them; a patch that touches another file must say which of upstream's
#      tests cover it);
#   3. copy upstream's test files of the package (they share helpers, so all
#      of them are compiled), fixtures/ and testing/, and apply ADAPTATIONS,
#      each of which must match exactly one line;
#   4. run every test of TEST_FILES but those named in SKIPS, and check that
#      each of them ran and passed.
#
# Environment: GO (default go); GOTOOLCHAIN (default: the root go.mod's
# toolchain line, as in the Makefile).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

GO=${GO:-go}
export GOTOOLCHAIN=${GOTOOLCHAIN:-$(awk '$1 == "toolchain" {print $2}' go.mod)}
export GOWORK=off

MODULE=github.com/segmentio/kafka-go
VERSION=v0.4.51
# The release's hashes (sum.golang.org): what `go mod verify` holds the module
# cache's copy to.
SUM=h1:JgDPPG75tC1rWIS2Me6MwcvXJ6f49UQ4HjAOef71Hno=
GOMODSUM=h1:Y1gn60kzLEEaW28YshXyk2+VCUKbJ3Qr6DrnT3i4+9E=

# What the patch changes (billing.1-4) and adds, besides its own tests.
PATCHED="batch.go conn.go message_reader.go read.go reader.go"
ADDED="bounded.go txn.go"

# Upstream's test files whose tests run, with the patched file each covers.
# txn.go and bounded.go, new, have no upstream test: txn_test.go and
# bounded_test.go (`make test-kafka-go`) are theirs.
TEST_FILES=(
	message_test.go # message_reader.go (messageSetReader) and read.go (readFetchResponseHeaderV10), on built and captured (fixtures/) fetch responses
	read_test.go    # read.go
	discard_test.go # discard.go: not changed, but the patch skips hidden batches and dropped headers with its discardN
	conn_test.go    # conn.go
	batch_test.go   # batch.go
	reader_test.go  # reader.go (billing.4: the Reader passes its bounds and budget on, and releases the messages it drops)
)

# Tests of TEST_FILES that do not run, each with its reason. Only these are
# skipped; one that is not in TEST_FILES is an error.
# No test of TEST_FILES expects a behaviour the patch changes on purpose
# (markers, aborted records, empty batches, bad counts, header floods): none
# builds such a batch. A test that does must be listed here, reason given.
SKIPS=(
	"TestConn                      needs a broker on localhost:9092 (upstream runs one in docker-compose)"
	"TestReadPartitionsNoTopic     needs a broker on 127.0.0.1:9092"
	"TestUnsupportedSASLMechanism  needs a broker with SASL on 127.0.0.1:9093"
	"TestBatchDontExpectEOF        needs a broker on localhost:9092"
	"TestReader                    needs a broker on localhost:9092"
	"TestReaderOnNonZeroPartition  needs a broker on localhost:9092"
	"TestReadTruncatedMessages     needs a broker on localhost:9092"
	"TestCloseLeavesGroup          needs a broker on localhost:9092"
	"TestReaderConsumerGroup       needs a broker on localhost:9092"
	"TestRebalanceTooManyConsumers needs a broker on localhost:9092"
	"TestConsumerGroupWithMissingTopic needs a broker on localhost:9092"
	"TestConsumerGroupWithTopic    needs a broker on localhost:9092"
	"TestConsumerGroupWithGroupTopicsSingle needs a broker on localhost:9092"
	"TestConsumerGroupWithGroupTopicsMultiple needs a broker on localhost:9092"
	"TestReaderTruncatedResponse   needs a broker on localhost:9092"
	"TestReaderReadCompactedMessage needs a broker on localhost:9092"
	"TestCommitLoopImmediateFlushOnGenerationEnd races in upstream's test, over commitLoopImmediate, which the patch does not touch (the same function as upstream's, byte for byte): it queues 100 commits, starts the loop and closes the generation at once, and expects one merged commit; when the loop's goroutine runs before the close it commits them one by one (got 100 in CI; upstream's own tree fails it 9 times in 600 with go test -race -count=300 -cpu 1,2)"
	"TestErrorCannotConnectGroupSubscription races in upstream's reader.go, which the patch does not touch: the refused dial's error is sent to FetchMessage only if it already waits (a non-blocking send on runError), else dropped, and the next try waits JoinGroupBackoff (5 s) past the test's 2 s deadline; failed so under make test's load (kafka-go issue #1169: its reader tests are flaky)"
)

# Changes to upstream's test files that the patch makes necessary, each
# replacing one whole line (FILE, the line, its replacement, why).
ADAPTATIONS=(
	"message_test.go"
	$'\t_, _, remain, err := readFetchResponseHeaderV10(bufReader, len(bs))'
	$'\t_, _, remain, _, err := readFetchResponseHeaderV10(bufReader, len(bs))'
	"billing.1: readFetchResponseHeaderV10 also returns the aborted transactions"

	"go.mod"
	"go 1.23"
	"go 1.23.0"
	"not the patch: the tests import golang.org/x/net/nettest, whose v0.38.0 needs go 1.23.0, which sorts after 1.23; Go >= 1.21 then asks for a go.mod update (upstream's own tree fails the same way)"
)

die() {
	echo "kafka-go-upstream-tests: $*" >&2
	exit 1
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/kafka-go-upstream.XXXXXX")
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT

# 1. Upstream, verified. A throwaway module that requires the release with
# its hashes in go.sum: `go mod download` checks what it fetches against them,
# `go mod verify` checks the extracted directory (the cache is writable by
# root, and a go command run inside it with -mod=mod rewrites its go.mod).
mkdir "$tmp/verify"
printf 'module verify\n\ngo 1.23\n\nrequire %s %s\n' "$MODULE" "$VERSION" >"$tmp/verify/go.mod"
printf '%s %s %s\n%s %s/go.mod %s\n' "$MODULE" "$VERSION" "$SUM" "$MODULE" "$VERSION" "$GOMODSUM" >"$tmp/verify/go.sum"
(cd "$tmp/verify" && "$GO" mod download "$MODULE" && "$GO" mod verify >/dev/null) ||
	die "$MODULE@$VERSION: cannot fetch it, or the module cache's copy does not match $SUM"
upstream=$(cd "$tmp/verify" && "$GO" list -m -f '{{.Dir}}' "$MODULE")
[[ -d $upstream ]] || die "$MODULE@$VERSION: no directory in the module cache"

# 2. The files the patch touches.
src=$root/third_party/kafka-go
changed=() added=()
while IFS= read -r f; do
	if [[ ! -e $upstream/$f ]]; then
		added+=("$f")
	elif ! cmp -s "$upstream/$f" "$src/$f"; then
		changed+=("$f")
	fi
done < <(cd "$src" && find . -type f ! -name '*_test.go' ! -path './testdata/*' ! -name PATCHES.md | sed 's|^\./||' | LC_ALL=C sort)
[[ "${changed[*]}" == "$PATCHED" && "${added[*]}" == "$ADDED" ]] ||
	die "third_party/kafka-go against $VERSION: changed [${changed[*]}], added [${added[*]}]; this script expects changed [$PATCHED], added [$ADDED]: update PATCHED/ADDED and TEST_FILES (upstream's tests of the files now touched) here and in PATCHES.md"
echo "kafka-go-upstream-tests: the patch changes $PATCHED and adds $ADDED (against $MODULE@$VERSION, verified)"

# 3. The copy, with upstream's tests.
dst=$tmp/kafka-go
cp -R "$src" "$dst"
for f in "$upstream"/*_test.go; do
	[[ ! -e $dst/${f##*/} ]] || die "third_party/kafka-go has a test file named as upstream's: ${f##*/}"
	cp "$f" "$dst/"
done
cp -R "$upstream/fixtures" "$upstream/testing" "$dst/"
chmod -R u+w "$dst" # the module cache's files are read-only

for ((i = 0; i < ${#ADAPTATIONS[@]}; i += 4)); do
	file=${ADAPTATIONS[i]} old=${ADAPTATIONS[i + 1]} new=${ADAPTATIONS[i + 2]}
	n=$(grep -cxF -- "$old" "$dst/$file" || true)
	[[ $n == 1 ]] || die "adaptation of $file: the line '$old' occurs $n times, not once; look at it again"
	OLD=$old NEW=$new awk '$0 == ENVIRON["OLD"] { print ENVIRON["NEW"]; next } { print }' "$dst/$file" >"$tmp/adapted"
	cat "$tmp/adapted" >"$dst/$file"
done

# 4. The tests.
tests=() skips=()
for f in "${TEST_FILES[@]}"; do
	[[ -e $dst/$f ]] || die "$f: no such upstream test file in $VERSION"
	while IFS= read -r t; do tests+=("$t"); done < <(sed -n 's/^func \(Test[A-Za-z0-9_]*\)(t \*testing\.T) {$/\1/p' "$dst/$f")
done
for s in "${SKIPS[@]}"; do
	name=${s%% *}
	[[ " ${tests[*]} " == *" $name "* ]] || die "skip $name: not a test of ${TEST_FILES[*]}"
	skips+=("$name")
done
want=() # the tests that must run and pass
for t in "${tests[@]}"; do
	[[ " ${skips[*]} " == *" $t "* ]] || want+=("$t")
done
run=$(
	IFS='|'
	echo "${want[*]}"
)
skip=$(
	IFS='|'
	echo "${skips[*]}"
)

cd "$dst"
if ! CGO_ENABLED=1 "$GO" test -race -count=1 -v -run "^($run)$" -skip "^($skip)$" . >"$tmp/out" 2>&1; then
	cat "$tmp/out"
	die "upstream's tests fail against the patched copy (above)"
fi
passed=$(grep -c '^--- PASS: ' "$tmp/out" || true)
for t in "${want[@]}"; do
	grep -q "^--- PASS: $t " "$tmp/out" || {
		cat "$tmp/out"
		die "$t did not run"
	}
done
[[ $passed == "${#want[@]}" ]] || {
	cat "$tmp/out"
	die "$passed tests passed, ${#want[@]} expected"
}
echo "kafka-go-upstream-tests: ${#want[@]} of upstream's tests passed (-race) against the patched copy, from ${TEST_FILES[*]}: ${want[*]}"
for s in "${SKIPS[@]}"; do
	echo "kafka-go-upstream-tests: skipped ${s%% *}: $(sed 's/^[^ ]* *//' <<<"$s")"
done
grep '^ok' "$tmp/out"
