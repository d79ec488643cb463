#!/usr/bin/env bash
# deps.sh - make sure this machine has what `make test` needs, installing it
# from Debian's packages and Maven Central when it does not. Idempotent: on a
# machine that has everything it only checks, in well under a second.
#
#   go              a go command (not installed here: CI machines come with
#                   one), then the release go.mod's toolchain line names,
#                   which the go command fetches from the Go module proxy
#   postgres        a PostgreSQL server binary under /usr/lib/postgresql/*/bin;
#                   the tests start throwaway clusters of their own, so the
#                   package's system cluster is never started
#   pgbouncer       PgBouncer, for the tests that run billing behind it in
#                   transaction mode (internal/testkit/pgbouncertest); its system
#                   service is never started
#   java, mvn       to fetch and run the real Kafka broker
#   kafka jars      scripts/kafka.sh fetch
#   prometheus      a Prometheus server, for the end-to-end test that loads the
#                   shipped rules and scrapes the built binary (e2e), and its
#                   promtool (the same Debian package), for the rules' unit
#                   tests (deploy); its system service is never started
#   squawk          the migration linter of `make lint` (scripts/squawk.sh):
#                   PyPI's squawk-cli (a Rust binary in a wheel) at
#                   SQUAWK_VERSION, in a virtualenv of its own under
#                   $XDG_CACHE_HOME/billing (~/.cache/billing)
#   stripemock      stripe-mock (Stripe's mock of its API), built with `go install`
#                   from the Go module proxy into $BILLING_CACHE_DIR/stripe-mock-VERSION
#                   (default /var/cache/billing), outside the repository; the
#                   Stripe adapter's tests start it (internal/testkit/stripemock)
#   golangcilint    golangci-lint at GOLANGCI_LINT_VERSION for `make lint`: no
#                   allowed registry ships it prebuilt, so it is built once with
#                   `go install` into $BILLING_CACHE_DIR/golangci-lint-VERSION,
#                   outside the build cache, so that an emptied GOCACHE does
#                   not mean building it again
#   govulncheck     govulncheck at GOVULNCHECK_VERSION for `make vulncheck`,
#                   built the same way and for the same reason (`go run` built
#                   it into the build cache, again from every empty one)
#
#   scripts/deps.sh                 everything
#   scripts/deps.sh postgres java   only those (go, make, postgres, pgbouncer, java, kafka, prometheus, stripemock, squawk, golangcilint, govulncheck)
#
# Installing needs root (CI runs as root). Prints one line per thing checked.
set -euo pipefail
cd "$(dirname "$0")/.."

checks=("$@")
[[ ${#checks[@]} -gt 0 ]] || checks=(go make postgres pgbouncer java kafka prometheus stripemock squawk golangcilint govulncheck)
for c in "${checks[@]}"; do
	case $c in
	go | make | postgres | pgbouncer | java | kafka | prometheus | stripemock | squawk | golangcilint | govulncheck) ;;
	*)
		echo "deps: unknown check $c (go, make, postgres, pgbouncer, java, kafka, prometheus, stripemock, squawk, golangcilint, govulncheck)" >&2
		exit 2
		;;
	esac
done
want() { [[ " ${checks[*]} " == *" $1 "* ]]; }

apt_updated=
apt_install() {
	[[ $(id -u) == 0 ]] || {
		echo "deps: missing $*; run as root or: sudo apt-get install -y $*" >&2
		exit 1
	}
	if [[ -z $apt_updated ]]; then
		apt-get update -qq
		apt_updated=1
	fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

check_go() {
	command -v go >/dev/null || {
		echo "deps: go not found (install Go 1.26 or later)" >&2
		exit 1
	}
	# A Go whose default is GOTOOLCHAIN=local (its go.env) ignores go.mod's
	# toolchain line: name the release, as the Makefile does, and the go
	# command fetches it. An explicit GOTOOLCHAIN must not run an older Go.
	local want have
	want=$(awk '$1 == "toolchain" {print $2}' go.mod)
	export GOTOOLCHAIN=${GOTOOLCHAIN:-$want}
	have=$(go env GOVERSION)
	if [[ $(printf '%s\n' "$want" "$have" | sort -V | head -n 1) != "$want" ]]; then
		echo "deps: GOTOOLCHAIN=$GOTOOLCHAIN runs $have, older than go.mod's toolchain $want: unset it or set it to $want" >&2
		exit 1
	fi
	echo "go: $(go version) (GOTOOLCHAIN=$GOTOOLCHAIN)"
}

check_make() {
	command -v make >/dev/null || apt_install make
	echo "make: $(command -v make)"
}

postgres_bin() { compgen -G '/usr/lib/postgresql/*/bin/postgres' | sort -V | tail -n 1; }

check_postgres() {
	local pg own_policy
	pg=$(postgres_bin || true)
	if [[ -n $pg ]]; then
		echo "postgres: $pg ($("$pg" --version))"
		return
	fi
	# Tests run their own clusters, and a running one would only hold a port.
	apt_install_no_start postgresql
	# In case a cluster was started all the same (a policy-rc.d that allows it).
	if command -v pg_lsclusters >/dev/null; then
		pg_lsclusters -h 2>/dev/null | awk '$4 ~ /^online/ {print $1, $2}' | while read -r ver name; do
			pg_ctlcluster "$ver" "$name" stop || true
		done
	fi
	pg=$(postgres_bin || true)
	[[ -n $pg ]] || {
		echo "deps: postgresql installed but no /usr/lib/postgresql/*/bin/postgres" >&2
		exit 1
	}
	echo "postgres: $pg ($("$pg" --version)), installed"
}

# apt_install_no_start installs packages without starting their system
# services: policy-rc.d (exit 101) tells invoke-rc.d not to. An existing
# policy-rc.d (a container image's) is left as it is.
apt_install_no_start() {
	local own_policy=
	if [[ ! -e /usr/sbin/policy-rc.d ]]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
		chmod +x /usr/sbin/policy-rc.d
		own_policy=1
	fi
	apt_install "$@"
	if [[ -n $own_policy ]]; then rm -f /usr/sbin/policy-rc.d; fi
}

check_pgbouncer() {
	if ! command -v pgbouncer >/dev/null; then
		# Tests start their own PgBouncer on a free port; the package's
		# service would only hold 6432.
		apt_install_no_start pgbouncer
		if command -v systemctl >/dev/null && systemctl is-active --quiet pgbouncer 2>/dev/null; then
			systemctl stop pgbouncer || true
		fi
	fi
	echo "pgbouncer: $(command -v pgbouncer) ($(pgbouncer --version | head -n 1))"
}

check_java() {
	if ! command -v java >/dev/null || ! command -v mvn >/dev/null; then
		apt_install default-jdk-headless maven
	fi
	echo "java: $(java -version 2>&1 | head -n 1)"
	echo "mvn: $(mvn -v 2>/dev/null | head -n 1 | sed 's/\x1b\[[0-9;]*m//g')"
}

check_kafka() {
	want java || check_java # the fetch needs mvn, the broker java
	bash scripts/kafka.sh fetch
}

check_prometheus() {
	if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null; then
		# The test starts its own server on a free port with its own
		# configuration; the package's service would only hold 9090.
		apt_install_no_start prometheus
		if command -v systemctl >/dev/null && systemctl is-active --quiet prometheus 2>/dev/null; then
			systemctl stop prometheus || true
		fi
	fi
	echo "prometheus: $(command -v prometheus) ($(prometheus --version 2>&1 | head -n 1))"
	echo "promtool: $(command -v promtool)"
}

# The migration linter's release: the rules and their names change between
# releases, so the one migrations/.squawk.toml was written for.
SQUAWK_VERSION=2.70.0

check_squawk() {
	local dir=${XDG_CACHE_HOME:-$HOME/.cache}/billing/squawk-$SQUAWK_VERSION
	if [[ ! -x $dir/bin/squawk ]] || [[ $("$dir/bin/squawk" --version 2>/dev/null) != "squawk $SQUAWK_VERSION" ]]; then
		command -v python3 >/dev/null || apt_install python3 python3-venv
		rm -rf "$dir"
		python3 -m venv "$dir" || {
			apt_install python3-venv
			python3 -m venv "$dir"
		}
		"$dir/bin/pip" install --quiet --disable-pip-version-check "squawk-cli==$SQUAWK_VERSION"
	fi
	echo "squawk: $dir/bin/squawk ($("$dir/bin/squawk" --version))"
}

# STRIPE_MOCK_VERSION must match internal/testkit/stripemock.Version.
STRIPE_MOCK_VERSION=v0.203.0

# go_install_cached PKG@VERSION DIR: the binary of PKG at VERSION in DIR,
# built there by go install unless already present. It is built beside and
# moved into place, so that a run stopped halfway never leaves a binary that
# the next run would take for whole. Prints the binary's path.
# The caller makes sure of go first (check_go), in its own shell.
go_install_cached() {
	local pkg=$1 dir=$2 name bin tmp
	name=${pkg%@*}
	name=${name##*/}
	bin="$dir/$name"
	if [[ ! -x $bin ]]; then
		mkdir -p "$dir"
		tmp=$(mktemp -d "$dir/.build-XXXXXX")
		GOBIN="$tmp" go install "$pkg" >&2
		mv "$tmp/$name" "$bin"
		rmdir "$tmp"
	fi
	echo "$bin"
}

# check_go_tool CHECK PKG VERSION: the Go program PKG at VERSION, built once
# into the cache directory (go_install_cached) under PKG's last element and
# VERSION, outside the repository and the build cache.
check_go_tool() {
	local check=$1 pkg=$2 version=$3 bin
	want go || check_go >/dev/null # go install needs go.mod's toolchain
	bin=$(go_install_cached "$pkg@$version" "${BILLING_CACHE_DIR:-/var/cache/billing}/${pkg##*/}-$version")
	echo "$check: $bin ($version)"
}

check_stripemock() { check_go_tool stripemock github.com/stripe/stripe-mock "$STRIPE_MOCK_VERSION"; }

# GOLANGCI_LINT_VERSION must match the Makefile's.
GOLANGCI_LINT_VERSION=v2.15.0
check_golangcilint() {
	check_go_tool golangcilint github.com/golangci/golangci-lint/v2/cmd/golangci-lint "$GOLANGCI_LINT_VERSION"
}

# GOVULNCHECK_VERSION must match the Makefile's.
GOVULNCHECK_VERSION=v1.9.0
check_govulncheck() { check_go_tool govulncheck golang.org/x/vuln/cmd/govulncheck "$GOVULNCHECK_VERSION"; }

for c in go make postgres pgbouncer java kafka prometheus stripemock squawk golangcilint govulncheck; do
	if want "$c"; then "check_$c"; fi
done
