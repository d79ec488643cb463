#!/usr/bin/env bash
# squawk.sh - lint every migration file with squawk (migrations/.squawk.toml;
# migrations/README.md, "The lock discipline"), then make sure the lint still
# bites: a planted `CREATE INDEX` without CONCURRENTLY on a table billing
# writes must fail it. Part of `make lint`; installs squawk first
# (scripts/deps.sh squawk). Exits non-zero on any finding.
set -euo pipefail
cd "$(dirname "$0")/.."

squawk=$(bash scripts/deps.sh squawk | sed -n 's/^squawk: \([^ ]*\) .*/\1/p')
[[ -x $squawk ]] || {
	echo "squawk.sh: scripts/deps.sh squawk gave no squawk" >&2
	exit 1
}

echo "squawk: migrations/*.sql"
(cd migrations && "$squawk" -c .squawk.toml --reporter gcc ./*.sql)

# The planted migration: what 1.1.0's 0004 did, an index built while it
# blocks every write to invoice.
planted=$(mktemp -d)
trap 'rm -rf "$planted"' EXIT
cp migrations/.squawk.toml "$planted/"
printf '%s\n' '-- planted by scripts/squawk.sh: must fail the lint' \
	'CREATE INDEX invoice_planted_idx ON invoice (created_at);' >"$planted/9999_planted.sql"
if out=$(cd "$planted" && "$squawk" -c .squawk.toml --reporter gcc 9999_planted.sql 2>&1); then
	echo "squawk.sh: squawk passed a planted CREATE INDEX without CONCURRENTLY; the lint checks nothing" >&2
	exit 1
fi
if [[ $out != *require-concurrent-index-creation* ]]; then
	echo "squawk.sh: squawk failed the planted index for another reason than require-concurrent-index-creation:" >&2
	echo "$out" >&2
	exit 1
fi
echo "squawk: a planted CREATE INDEX without CONCURRENTLY fails it, as it should"
