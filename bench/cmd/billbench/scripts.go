package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/infra/postgres/queries"
)

// The pgbench scripts of the two ceilings are built from the statements the
// store sends (infra/postgres/queries), at every run, each parameter
// replaced by a pgbench expression: the ceilings move with the store (the
// fence's attempts, the outbox…) and not only when someone remembers to
// edit a script. They are written beside the report (pgbench/), as run.
const (
	perEventScript = "reserve_settle.sql"
	groupedScript  = "reserve_settle_grouped.sql"
)

// Values that the scripts put in place of the store's parameters. Per event:
// order ids unique per client and run, event ids derived from them,
// UUIDv7-shaped from :ms (-D ms=<now in Unix ms>) so that they land in
// today's partition of processed_event. Per group: the same built
// server-side with generate_series over g = 1…:g, since pgbench passes no
// arrays.
const (
	benchOrder    = `('pgb-' || :client_id::text || '-' || :oid::text)`
	benchEvent    = `((lpad(to_hex(:ms::bigint), 12, '0') || substr(md5(:client_id::text || '-' || :oid::text), 13))::uuid)`
	benchSeries   = `generate_series(1, :g::int) AS g`
	benchOrders   = `(ARRAY(SELECT 'pgb-' || :client_id::text || '-' || (:base::bigint + g)::text FROM ` + benchSeries + `))`
	benchEvents   = `(ARRAY(SELECT (lpad(to_hex(:ms::bigint), 12, '0') || substr(md5(:client_id::text || '-' || (:base::bigint + g)::text), 13))::uuid FROM ` + benchSeries + `))`
	benchAttempts = `(ARRAY(SELECT :base::bigint + g FROM ` + benchSeries + `))`
	benchPublish  = `(true)` // BILLING_PUBLISH_EVENTS's default
)

// benchFill is an array of :g copies of the value v of type typ.
func benchFill(v, typ string) string { return `(array_fill((` + v + `)::` + typ + `, ARRAY[:g::int]))` }

// benchTerms are the attempt's life and the key age past which an invoice is
// held, in seconds, as the service's defaults make them
// (BILLING_PAYMENT_TIMEOUT 10s, BILLING_GATEWAY_KEY_TTL 24h).
func benchTerms() (life, holdAfter string) {
	t := order.NewAttemptTerms(10*time.Second, 24*time.Hour)
	return "(" + strconv.FormatFloat(t.Life.Seconds(), 'f', -1, 64) + ")", "(" + strconv.FormatFloat(t.HoldAfter.Seconds(), 'f', -1, 64) + ")"
}

// bindPgbench returns the statement called name with each parameter $n
// replaced by vals[n-1]; it fails unless vals gives one value per
// parameter, so that a statement that gains or loses one stops the bench
// rather than measuring something else.
func bindPgbench(all map[string]queries.Statement, name string, vals ...string) (string, error) {
	st, ok := all[name]
	switch {
	case !ok:
		return "", fmt.Errorf("pgbench script: no statement %s in infra/postgres/queries", name)
	case st.Params != len(vals):
		return "", fmt.Errorf("pgbench script: statement %s takes %d parameters, the script gives %d", name, st.Params, len(vals))
	case len(st.Vars) > 0:
		return "", fmt.Errorf("pgbench script: statement %s has variables %v", name, st.Vars)
	}
	return queries.ReplaceParams(st.SQL, func(n int) (string, error) { return vals[n-1], nil })
}

// pgbenchScripts returns the two scripts, by file name, built from all.
func pgbenchScripts(all map[string]queries.Statement) (map[string]string, error) {
	life, holdAfter := benchTerms()
	var errs []error
	bind := func(name string, vals ...string) string {
		s, err := bindPgbench(all, name, vals...)
		errs = append(errs, err)
		return s
	}
	plain := func(name string) string { return bind(name) }

	perEvent := `-- ` + perEventScript + ` - what one event does in Postgres, for the pgbench
-- ceiling of ` + "`make bench`" + ` (bench/cmd/billbench). One run of this script is one
-- pgbench "transaction" and stands for one event, as infra/postgres.Store sends
-- it while events are few (a group of one): the reserve as one pipeline
-- (reserve_one: dedup row, invoice insert or reopen, the attempt taken or the
-- invoice held; then invoices_for_update; one implicit transaction committed at
-- the pipeline's Sync, as a pgx batch is), then the settle, settle_one with its
-- invoice event, on its own and committed durably: the yardstick kept from
-- before the store's settles stopped waiting for their WAL flush
-- (settle_prelude), so that targets set against it stay comparable. The
-- gateway call between them is not modelled: this is the database's ceiling.
--
-- Built by billbench from infra/postgres/queries/*.sql, each parameter replaced
-- by a value. Run with -M prepared, as pgx caches its statements.
\set oid random(1, 9223372036854775806)
\startpipeline
` + bind("reserve_one", benchOrder, benchEvent, `('cus-' || :client_id::text)`, `(12990)`, `('EUR')`, `(:oid)`, `('pgbench')`,
		life, holdAfter, `('bench')`, benchPublish) + `;
` + bind("invoices_for_update", `(ARRAY[`+benchOrder+`])`) + `;
\endpipeline
` + bind("settle_one", benchOrder, benchEvent, `(:oid)`, `('charged')`, `('ch_pgbench')`, `('')`, `('')`, benchPublish, `('201')`) + `;
`

	grouped := `-- ` + groupedScript + ` - what a group of :g concurrent events does in
-- Postgres, as infra/postgres.Store groups their database work, for the grouped
-- pgbench ceiling of ` + "`make bench`" + ` (bench/cmd/billbench). One run of this script
-- is one pgbench "transaction" and stands for :g events (the driver passes
-- -D g=<G>), so its events/s is tps x G. Beside it the report keeps the ceiling
-- of ` + perEventScript + `, the per-event shape, as the yardstick.
--
-- The shape: the reserves of the group as one pipeline (one implicit
-- transaction committed at its Sync): reserve_prelude, reserve_group (dedup
-- rows, invoice inserts and reopens, attempts taken or invoices held), then
-- invoices_for_update of the group's invoices in order_id order; then the
-- settles of the group as one pipeline: settle_prelude, whose commit does not
-- wait for its WAL flush, and settle_group with their invoice events. The
-- gateway call between them is not modelled.
--
-- Built by billbench from infra/postgres/queries/*.sql, each parameter replaced
-- by a value. The store unnests array parameters, which pgbench builds
-- server-side with generate_series; run with -M prepared, as pgx caches its
-- statements.
\set base random(1, 9223372036854775806 - 100000)
\startpipeline
` + plain("reserve_prelude") + `;
` + bind("reserve_group", benchOrders, benchEvents, benchFill(`'cus-' || :client_id::text`, "text"), benchFill(`12990`, "bigint"),
		benchFill(`'EUR'`, "text"), benchAttempts, `('pgbench')`, life, holdAfter, `('bench')`, benchPublish) + `;
` + bind("invoices_for_update", benchOrders) + `;
\endpipeline
\startpipeline
` + plain("settle_prelude") + `;
` + bind("settle_group", benchOrders, benchEvents, benchAttempts, benchFill(`'charged'`, "text"),
		benchFill(`'ch_pgbench'`, "text"), benchFill(`''`, "text"), benchFill(`''`, "text"), benchPublish, benchFill(`'201'`, "text")) + `;
\endpipeline
`
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return map[string]string{perEventScript: perEvent, groupedScript: grouped}, nil
}

// writePgbenchScripts writes the two scripts into dir/pgbench and returns
// their paths: the per-event one, then the grouped one.
func writePgbenchScripts(dir string) (perEvent, grouped string, err error) {
	all, err := queries.Load()
	if err != nil {
		return "", "", err
	}
	scripts, err := pgbenchScripts(all)
	if err != nil {
		return "", "", err
	}
	dir = filepath.Join(dir, "pgbench")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	for name, text := range scripts {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			return "", "", err
		}
	}
	return filepath.Join(dir, perEventScript), filepath.Join(dir, groupedScript), nil
}
