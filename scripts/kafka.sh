#!/usr/bin/env bash
# kafka.sh - a real single-node Apache Kafka broker (KRaft, combined
# broker+controller) built from the jars on Maven Central, for tests.
#
#   scripts/kafka.sh fetch                     resolve the broker jars into the cache (idempotent)
#   scripts/kafka.sh libs                      print the jar directory; exit 1 if not fetched
#   scripts/kafka.sh start DATADIR PORT [CPORT] format storage (unless DATADIR holds a broker's data
#                                              already: a restart) and start a broker on 127.0.0.1:PORT
#   scripts/kafka.sh stop DATADIR              stop the broker started in DATADIR
#
# Environment:
#   KAFKA_VERSION          default 4.1.1 (kafka-go needs 3.9.x or >= 4.0.1; 4.0.0 is refused)
#   BILLING_CACHE_DIR      default /var/cache/billing; jars go to $BILLING_CACHE_DIR/kafka-$KAFKA_VERSION/libs
#                          (with kafka.jsa, a class data sharing archive, beside libs/), the Maven
#                          repository to $BILLING_CACHE_DIR/m2
#   KAFKA_HEAP_OPTS        default "-Xms128m -Xmx512m"
#   KAFKA_START_TIMEOUT    seconds to wait for the broker, default 60
#   KAFKA_OWNER_PID        when set, a watchdog stops the broker once that process is gone
#                          (the Go test helper sets it, so a killed test run leaves no broker behind)
#
# Why Maven and not the release tarball: the only network this project has is the
# package registries, and Maven Central carries every jar of the broker.
set -euo pipefail

KAFKA_VERSION=${KAFKA_VERSION:-4.1.1}
CACHE_DIR=${BILLING_CACHE_DIR:-/var/cache/billing}
KAFKA_HOME="$CACHE_DIR/kafka-$KAFKA_VERSION"
LIBS="$KAFKA_HOME/libs"
# log4j-slf4j-impl binds the slf4j 1.7 API that Kafka 4.1 uses to the log4j2
# core that kafka-server already brings, so the broker logs to our file.
LOG4J_VERSION=2.24.3
DEPENDENCY_PLUGIN=org.apache.maven.plugins:maven-dependency-plugin:3.8.1

die() {
	echo "kafka.sh: $*" >&2
	exit 1
}

check_version() {
	case "$KAFKA_VERSION" in
	4.0.0) die "Kafka 4.0.0 does not work with kafka-go (use 3.9.x or >= 4.0.1)" ;;
	3.9.* | 4.*) ;;
	*) die "unsupported KAFKA_VERSION $KAFKA_VERSION (use 3.9.x or >= 4.0.1)" ;;
	esac
}

fetched() { [[ -f "$KAFKA_HOME/.complete" ]]; }

cmd_fetch() {
	check_version
	mkdir -p "$CACHE_DIR"
	# One fetch at a time per version: CI and a developer's parallel runs share the cache.
	exec 9>"$CACHE_DIR/kafka-$KAFKA_VERSION.lock"
	flock 9
	if fetched; then
		echo "kafka $KAFKA_VERSION: cached in $LIBS ($(du -sh "$LIBS" | cut -f1))"
		build_cds
		return
	fi
	command -v mvn >/dev/null || die "mvn not found (apt-get install maven)"
	local start tmp
	start=$(date +%s%N)
	tmp=$(mktemp -d)
	# shellcheck disable=SC2064 # expand now: tmp is local
	trap "rm -rf '$tmp'" EXIT
	cat >"$tmp/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>com.acme.billing</groupId>
  <artifactId>kafka-broker-libs</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>$KAFKA_VERSION</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>$LOG4J_VERSION</version>
    </dependency>
  </dependencies>
</project>
EOF
	rm -rf "$LIBS.tmp"
	mvn -B -q -Dstyle.color=never -f "$tmp/pom.xml" -Dmaven.repo.local="$CACHE_DIR/m2" \
		"$DEPENDENCY_PLUGIN:copy-dependencies" \
		-DincludeScope=runtime -DoutputDirectory="$LIBS.tmp" >"$tmp/mvn.log" 2>&1 || {
		cat "$tmp/mvn.log" >&2
		die "mvn could not resolve org.apache.kafka:kafka_2.13:$KAFKA_VERSION"
	}
	[[ -f "$LIBS.tmp/kafka_2.13-$KAFKA_VERSION.jar" ]] || die "kafka_2.13-$KAFKA_VERSION.jar missing after mvn"
	rm -rf "$LIBS"
	mv "$LIBS.tmp" "$LIBS"
	touch "$KAFKA_HOME/.complete"
	trap - EXIT
	rm -rf "$tmp"
	printf 'kafka %s: fetched %s jars (%s) into %s in %d ms (maven repository %s, %s)\n' \
		"$KAFKA_VERSION" "$(find "$LIBS" -name '*.jar' | wc -l)" "$(du -sh "$LIBS" | cut -f1)" \
		"$LIBS" $((($(date +%s%N) - start) / 1000000)) "$CACHE_DIR/m2" "$(du -sh "$CACHE_DIR/m2" | cut -f1)"
	build_cds
}

# build_cds records the classes a broker loads while it starts into a class
# data sharing archive (JDK 13+ dynamic AppCDS), which later starts map instead
# of parsing some 5000 classes from the jars: about a second less per start.
# Best effort: without the archive the broker starts as well, only slower.
build_cds() {
	local jsa="$KAFKA_HOME/kafka.jsa"
	[[ -f $jsa || -f "$KAFKA_HOME/.cds-failed" ]] && return
	command -v java >/dev/null || return 0
	local start dir
	start=$(date +%s%N)
	dir=$(mktemp -d)
	# A subshell, so that a die in cmd_start ends only this attempt.
	if (KAFKA_CDS_DUMP="$jsa.tmp" cmd_start "$dir" "$(free_port)" >/dev/null) &&
		(cmd_stop "$dir" >/dev/null) && [[ -s "$jsa.tmp" ]]; then
		mv "$jsa.tmp" "$jsa"
		printf 'kafka %s: class data sharing archive %s (%s) built in %d ms\n' "$KAFKA_VERSION" "$jsa" \
			"$(du -sh "$jsa" | cut -f1)" $((($(date +%s%N) - start) / 1000000))
	else
		(cmd_stop "$dir" >/dev/null 2>&1) || true
		rm -f "$jsa.tmp"
		touch "$KAFKA_HOME/.cds-failed"
		echo "kafka $KAFKA_VERSION: no class data sharing archive (brokers start without it)"
	fi
	rm -rf "$dir"
}

cmd_libs() {
	fetched || die "kafka $KAFKA_VERSION jars not in $LIBS: run scripts/kafka.sh fetch"
	echo "$LIBS"
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

free_port() {
	local p
	for _ in $(seq 1 100); do
		p=$((20000 + RANDOM % 40000))
		port_open "$p" || {
			echo "$p"
			return
		}
	done
	die "no free port found"
}

# alive PID: the process exists and is not a zombie (pid 1 of a container may never reap it).
alive() {
	local state
	state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
	[[ -n $state && $state != Z ]]
}

running() { [[ -f "$1/kafka.pid" ]] && alive "$(cat "$1/kafka.pid")"; }

cmd_start() {
	[[ $# -ge 2 ]] || die "usage: kafka.sh start DATADIR PORT [CONTROLLER_PORT]"
	local dir port cport
	dir=$(mkdir -p "$1" && cd "$1" && pwd)
	port=$2
	cport=${3:-$(free_port)}
	fetched || die "kafka $KAFKA_VERSION jars not in $LIBS: run scripts/kafka.sh fetch"
	command -v java >/dev/null || die "java not found (apt-get install default-jre-headless)"
	running "$dir" && die "a broker is already running from $dir (pid $(cat "$dir/kafka.pid"))"
	port_open "$port" && die "port $port is already in use"

	mkdir -p "$dir/data" "$dir/logs"
	# A restart from the same directory (same data, same ports): the last run's
	# log moves aside, so that the wait below sees this run's start line.
	[[ -f "$dir/logs/server.log" ]] && mv "$dir/logs/server.log" "$dir/logs/server.log.$(date +%s%N)"
	cat >"$dir/server.properties" <<EOF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$dir/data
num.partitions=1
auto.create.topics.enable=true
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
# One partition each: the internal topics are created on first use, and 50 take seconds.
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
# Tests use short session timeouts (kafkatest.FastReaderConfig); the default minimum is 6 s.
group.min.session.timeout.ms=500
num.network.threads=2
num.io.threads=2
EOF
	cat >"$dir/log4j2.properties" <<EOF
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = $dir/logs/server.log
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.state.name = state.change.logger
logger.state.level = WARN
EOF

	local start java_opts
	start=$(date +%s%N)
	# The JVM flags trade peak throughput for start-up time: a test broker lives seconds.
	# shellcheck disable=SC2206 # word splitting of the heap options is wanted
	java_opts=(${KAFKA_HEAP_OPTS:--Xms128m -Xmx512m} -XX:+UseSerialGC -XX:TieredStopAtLevel=1
		-Xss512k -Djava.awt.headless=true -Dlog4j2.configurationFile="$dir/log4j2.properties"
		-Dkafka.logs.dir="$dir/logs")

	local broker_opts=()
	if [[ -n ${KAFKA_CDS_DUMP:-} ]]; then
		broker_opts=(-XX:ArchiveClassesAtExit="$KAFKA_CDS_DUMP")
	elif [[ -f "$KAFKA_HOME/kafka.jsa" ]]; then
		# -Xshare:auto (the default) runs without the archive if it does not fit this JVM.
		broker_opts=(-XX:SharedArchiveFile="$KAFKA_HOME/kafka.jsa")
	fi
	local cds_opts=()
	[[ -z ${KAFKA_CDS_DUMP:-} ]] && cds_opts=("${broker_opts[@]}")
	if [[ ! -f "$dir/data/meta.properties" ]]; then
		local cluster_id
		# A random 16-byte id in Kafka's base64url form; one starting with '-' would read as an option.
		cluster_id=-
		while [[ $cluster_id == -* ]]; do
			cluster_id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')
		done
		java "${java_opts[@]}" "${cds_opts[@]}" -cp "$LIBS/*" kafka.tools.StorageTool format \
			--cluster-id "$cluster_id" --config "$dir/server.properties" --ignore-formatted \
			>"$dir/logs/format.log" 2>&1 || {
			cat "$dir/logs/format.log" >&2
			die "storage format failed"
		}
	fi

	java "${java_opts[@]}" "${broker_opts[@]}" -cp "$LIBS/*" kafka.Kafka "$dir/server.properties" \
		</dev/null >"$dir/logs/stdout.log" 2>&1 &
	local pid=$!
	echo "$pid" >"$dir/kafka.pid"

	rm -f "$dir/stopping"
	if [[ -n "${KAFKA_OWNER_PID:-}" ]]; then
		# Watchdog: kill the broker when its owner dies without calling stop (a killed
		# or timed-out test binary). It ends by itself once the broker is gone, and
		# leaves a broker that stop is already shutting down alone.
		(
			while alive "$KAFKA_OWNER_PID" && alive "$pid"; do sleep 1; done
			if alive "$pid" && [[ ! -e "$dir/stopping" ]] &&
				grep -qs "$dir/server.properties" "/proc/$pid/cmdline"; then
				kill -KILL "$pid" 2>/dev/null || true
			fi
		) </dev/null >/dev/null 2>&1 &
	fi

	local deadline=$((SECONDS + ${KAFKA_START_TIMEOUT:-60}))
	until grep -qs 'Kafka Server started' "$dir/logs/server.log" && port_open "$port"; do
		if ! alive "$pid"; then
			tail -n 40 "$dir/logs/server.log" "$dir/logs/stdout.log" >&2 || true
			die "broker exited during start-up (logs in $dir/logs)"
		fi
		if ((SECONDS >= deadline)); then
			tail -n 40 "$dir/logs/server.log" "$dir/logs/stdout.log" >&2 || true
			cmd_stop "$dir" >/dev/null
			die "broker not ready after ${KAFKA_START_TIMEOUT:-60}s (logs in $dir/logs)"
		fi
		sleep 0.1
	done
	printf 'kafka %s: started on 127.0.0.1:%s (controller %s, pid %s) in %d ms, logs in %s\n' \
		"$KAFKA_VERSION" "$port" "$cport" "$pid" $((($(date +%s%N) - start) / 1000000)) "$dir/logs"
}

cmd_stop() {
	[[ $# -ge 1 ]] || die "usage: kafka.sh stop DATADIR"
	local dir=$1 pid
	if [[ ! -d $dir ]]; then
		echo "kafka: no broker running from $dir"
		return
	fi
	touch "$dir/stopping"
	if ! running "$dir"; then
		rm -f "$dir/kafka.pid" "$dir/stopping"
		echo "kafka: no broker running from $dir"
		return
	fi
	pid=$(cat "$dir/kafka.pid")
	kill -TERM "$pid" 2>/dev/null || true
	# A controlled shutdown takes a second or two; after 20 s stop waiting for it.
	local deadline=$((SECONDS + 20))
	while alive "$pid"; do
		if ((SECONDS >= deadline)); then
			kill -KILL "$pid" 2>/dev/null || true
		fi
		sleep 0.1
	done
	rm -f "$dir/kafka.pid" "$dir/stopping"
	echo "kafka: stopped broker $pid"
}

case "${1:-}" in
fetch) cmd_fetch ;;
libs) cmd_libs ;;
start) shift && cmd_start "$@" ;;
stop) shift && cmd_stop "$@" ;;
*) die "usage: kafka.sh fetch | libs | start DATADIR PORT [CONTROLLER_PORT] | stop DATADIR" ;;
esac
