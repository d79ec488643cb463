package main

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/gofrs/uuid/v5"

	httpgateway "github.com/acme/billing/adapters/out/http"
	"github.com/acme/billing/core/order"
	"github.com/acme/billing/internal/testkit/gatewaystub"
	"github.com/acme/billing/internal/testkit/pgtest"
)

// BenchmarkReconcile measures how many orders a minute `billing reconcile`
// reconciles: n orders charged at the stub gateway (its list a hundred
// records a page, over HTTP on the loopback) and invoiced charged in a
// real Postgres, all in the period and all agreeing, so that the run is
// the daily one of a normal day: every invoice read, every record listed,
// no order looked up; and, apart, a day where every invoice names a charge
// the provider does not have, so that every order is looked up (one
// request each) and reported. One op is one run; orders/min is n per op
// over the time taken. Not an assertion: README.md, "Reconciliation",
// reports it.
func BenchmarkReconcile(b *testing.B) {
	for _, bc := range []struct {
		n          int
		discrepant bool
	}{{1_000, false}, {20_000, false}, {1_000, true}} {
		n := bc.n
		name := fmt.Sprintf("orders=%d", n)
		if bc.discrepant {
			name += "/every-order-looked-up"
		}
		b.Run(name, func(b *testing.B) {
			ctx := pgtest.Context(b)
			_, pool := pgtest.NewMigratedCluster(b)
			setValidEnv(b)
			b.Setenv("BILLING_DATABASE_URL", pool.Config().ConnString())
			stub := gatewaystub.New(gatewaystub.Options{NoCallLog: true})
			base := stub.StartTest(b)
			b.Setenv("BILLING_PAYMENT_BASE_URL", base)
			client, err := httpgateway.NewClient(base, 5*time.Second)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(client.CloseIdleConnections)

			orderIDs, keys, charges := make([]string, n), make([]uuid.UUID, n), make([]string, n)
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for w := range 8 {
				wg.Go(func() {
					for i := w; i < n; i += 8 {
						orderIDs[i], keys[i] = fmt.Sprintf("ord-bench-%06d", i), uuid.Must(uuid.NewV7())
						res, err := client.Charge(ctx, order.ChargeRequest{IdempotencyKey: keys[i], OrderID: orderIDs[i], CustomerID: "cus-bench",
							Amount: order.Money{Amount: 4200, Currency: "EUR"}})
						if err != nil {
							errs <- err
							return
						}
						charges[i] = res.ChargeID
						if bc.discrepant {
							charges[i] = "ch_not_at_the_provider"
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			if err := <-errs; err != nil {
				b.Fatal(err)
			}
			// Invoiced as billing's settles leave them (stamped: this
			// release's writes).
			if _, err := pool.Exec(ctx, `INSERT INTO invoice (order_id, event_id, customer_id, amount, currency, status, charge_id, key_sent_at, written_xact)
				SELECT o, k, 'cus-bench', 4200, 'EUR', 'charged', c, now(), pg_current_xact_id() FROM unnest($1::text[], $2::uuid[], $3::text[]) AS t(o, k, c)`,
				orderIDs, keys, charges); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for range b.N {
				err := run(ctx, []string{"reconcile", "--since", "1h"}, io.Discard, io.Discard)
				if (err != nil) != bc.discrepant || (err != nil && !errors.Is(err, errReported)) {
					b.Fatalf("reconcile: %v", err)
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Minutes(), "orders/min")
		})
	}
}
