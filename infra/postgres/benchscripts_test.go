package postgres

import (
	"flag"
	"os"
	"regexp"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite bench/*.sql from the store's statements")

// Values that the pgbench scripts of `make bench` put in place of the
// store's parameters. Per event: order ids unique per client and run, event
// ids derived from them, UUIDv7-shaped from :ms (-D ms=<now in Unix ms>) so
// that they land in today's partition of processed_event. Per group: the
// same built server-side with generate_series over g = 1…:g, since pgbench
// passes no arrays.
const (
	benchOrder    = `('pgb-' || :client_id::text || '-' || :oid::text)`
	benchEvent    = `((lpad(to_hex(:ms::bigint), 12, '0') || substr(md5(:client_id::text || '-' || :oid::text), 13))::uuid)`
	benchSeries   = `generate_series(1, :g::int) AS g`
	benchOrders   = `(ARRAY(SELECT 'pgb-' || :client_id::text || '-' || (:base::bigint + g)::text FROM ` + benchSeries + `))`
	benchEvents   = `(ARRAY(SELECT (lpad(to_hex(:ms::bigint), 12, '0') || substr(md5(:client_id::text || '-' || (:base::bigint + g)::text), 13))::uuid FROM ` + benchSeries + `))`
	benchAttempts = `(ARRAY(SELECT :base::bigint + g FROM ` + benchSeries + `))`
)

func benchFill(v, typ string) string { return `(array_fill((` + v + `)::` + typ + `, ARRAY[:g::int]))` }

// bind replaces sql's parameters $1… with values[0]….
func bind(sql string, values ...string) string {
	return regexp.MustCompile(`\$(\d+)`).ReplaceAllStringFunc(sql, func(p string) string {
		n := 0
		for _, c := range p[1:] {
			n = n*10 + int(c-'0')
		}
		return values[n-1]
	})
}

// The terms and switches the scripts run under: the service's defaults.
const (
	benchLife      = `(15)`    // BILLING_PAYMENT_TIMEOUT 10s + AttemptMargin
	benchHoldAfter = `(43200)` // BILLING_GATEWAY_KEY_TTL 24h / 2
	benchPublish   = `(true)`  // BILLING_PUBLISH_EVENTS
)

// benchScripts returns the pgbench scripts of `make bench` as the store's
// statements make them.
func benchScripts() map[string]string {
	one := []string{benchOrder, benchEvent, `('cus-' || :client_id::text)`, `(12990)`, `('EUR')`, `(:oid)`, `('pgbench')`,
		benchLife, benchHoldAfter, `('bench')`, benchPublish}
	group := []string{benchOrders, benchEvents, benchFill(`'cus-' || :client_id::text`, "text"), benchFill(`12990`, "bigint"),
		benchFill(`'EUR'`, "text"), benchAttempts, `('pgbench')`, benchLife, benchHoldAfter, `('bench')`, benchPublish}
	return map[string]string{
		"../../bench/reserve_settle.sql": `-- reserve_settle.sql - what one event does in Postgres, for the pgbench
-- ceiling of ` + "`make bench`" + ` (bench/cmd/billbench). One run of this script is
-- one pgbench "transaction" and stands for one event, as infra/postgres.Store
-- sends it while events are few (a group of one): the reserve as one
-- pipeline (sqlReserveOne: dedup row, invoice insert or reopen, the attempt
-- taken or the invoice held; then sqlInvoicesForUpdate; one implicit
-- transaction committed at the pipeline's Sync, as a pgx batch is), then
-- the settle, sqlSettleOne with its invoice event, on its own and committed
-- durably: the yardstick kept from before the store's settles stopped
-- waiting for their WAL flush (sqlSettlePrelude), so that targets set
-- against it stay comparable. The gateway call between them is not
-- modelled: this is the database's ceiling.
--
-- Generated from the store's statements, each parameter replaced by a
-- value (infra/postgres/benchscripts_test.go): do not edit; run
-- go test ./infra/postgres -run TestBenchScripts -update
-- after changing a statement. Run with -M prepared, as pgx caches its
-- statements.
\set oid random(1, 9223372036854775806)
\startpipeline
` + bind(sqlReserveOne, one...) + `;
` + bind(sqlInvoicesForUpdate, `(ARRAY[`+benchOrder+`])`) + `;
\endpipeline
` + bind(sqlSettleOne, benchOrder, benchEvent, `(:oid)`, `('charged')`, `('ch_pgbench')`, `('')`, `('')`, benchPublish) + `;
`,
		"../../bench/reserve_settle_grouped.sql": `-- reserve_settle_grouped.sql - what a group of :g concurrent events does in
-- Postgres, as infra/postgres.Store groups their database work, for the
-- grouped pgbench ceiling of ` + "`make bench`" + ` (bench/cmd/billbench). One run of
-- this script is one pgbench "transaction" and stands for :g events (the
-- driver passes -D g=<G>), so its events/s is tps x G. Beside it the report
-- keeps the ceiling of bench/reserve_settle.sql, the per-event shape, as the
-- yardstick.
--
-- The shape: the reserves of the group as one pipeline (one implicit
-- transaction committed at its Sync): sqlReservePrelude, sqlReserveGroup
-- (dedup rows, invoice inserts and reopens, attempts taken or invoices
-- held), then sqlInvoicesForUpdate of the group's invoices in order_id
-- order; then the settles of the group as one pipeline: sqlSettlePrelude,
-- whose commit does not wait for its WAL flush, and sqlSettleGroup with
-- their invoice events. The gateway call between them is not modelled.
--
-- Generated from the store's statements, each parameter replaced by a
-- value (infra/postgres/benchscripts_test.go): do not edit; run
-- go test ./infra/postgres -run TestBenchScripts -update
-- after changing a statement. The store unnests array parameters, which
-- pgbench builds server-side with generate_series; run with -M prepared, as
-- pgx caches its statements.
\set base random(1, 9223372036854775806 - 100000)
\startpipeline
` + sqlReservePrelude + `;
` + bind(sqlReserveGroup, group...) + `;
` + bind(sqlInvoicesForUpdate, benchOrders) + `;
\endpipeline
\startpipeline
` + sqlSettlePrelude + `;
` + bind(sqlSettleGroup, benchOrders, benchEvents, benchAttempts, benchFill(`'charged'`, "text"),
			benchFill(`'ch_pgbench'`, "text"), benchFill(`''`, "text"), benchFill(`''`, "text"), benchPublish) + `;
\endpipeline
`,
	}
}

// TestBenchScriptsCarryTheStoresStatements: the pgbench scripts of `make
// bench` measure the statements the store sends, each parameter replaced
// by a value, so that the ceilings move with the store (the fence's
// attempts, the outbox…) and not only when someone remembers to edit the
// scripts. TestPgbenchScripts (bench/cmd/billbench) runs them.
func TestBenchScriptsCarryTheStoresStatements(t *testing.T) {
	t.Parallel()
	for path, want := range benchScripts() {
		if *update {
			if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("%s is not the store's statements (go test ./infra/postgres -run TestBenchScripts -update rewrites it); it starts to differ at:\n%s",
				path, firstDifference(string(got), want))
		}
	}
}

// firstDifference shows where got and want part.
func firstDifference(got, want string) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	from := max(0, i-80)
	return "got:  …" + strings.ReplaceAll(got[from:min(len(got), i+80)], "\n", "⏎") +
		"\nwant: …" + strings.ReplaceAll(want[from:min(len(want), i+80)], "\n", "⏎")
}
