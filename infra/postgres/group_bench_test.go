package postgres_test

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gofrs/uuid/v5"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/testkit/pgtest"
)

// BenchmarkReserveSettle runs the database half of billing (Reserve, then
// Settle) for b.N events from c concurrent callers on one Store with the
// service's default pool of 8, as the consumer does with c events in
// flight, and reports the mean group size. The test cluster runs without
// fsync: this shows what grouping saves in CPU and round trips; `make
// bench` measures the service on a durable server.
// benchGroups, from BENCH_GROUPS, overrides the store's groups in flight
// (postgres.WithGroups) to compare settings; 0 keeps the default.
var benchGroups, _ = strconv.Atoi(os.Getenv("BENCH_GROUPS"))

func BenchmarkReserveSettle(b *testing.B) {
	for _, c := range []int{1, 64, 256} {
		b.Run(fmt.Sprintf("inflight=%d", c), func(b *testing.B) {
			ctx := b.Context()
			_, dsn := pgtest.NewDB(b)
			pool, err := postgres.NewPool(ctx, dsn, 8)
			if err != nil {
				b.Fatal(err)
			}
			defer pool.Close()
			var groups, events atomic.Int64
			store := postgres.NewStore(pool, postgres.WithGroupObserver(func(op string, n int) {
				groups.Add(1)
				events.Add(int64(n))
			}), postgres.WithGroups(benchGroups))
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			for range c {
				wg.Go(func() {
					for {
						i := next.Add(1)
						if i > int64(b.N) {
							return
						}
						id, _ := uuid.NewV7()
						inv := order.Invoice{OrderID: fmt.Sprintf("ord-%d-%d", c, i), EventID: id, CustomerID: "c", Amount: 100, Currency: "EUR", Status: order.StatusPending}
						r, err := store.Reserve(ctx, inv, group, terms)
						if err != nil {
							b.Error(err)
							return
						}
						if _, err := store.Settle(ctx, order.Settlement{OrderID: inv.OrderID, Key: id, Attempt: r.Attempt,
							Status: order.StatusCharged, ChargeID: "ch"}); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			if g := groups.Load(); g > 0 {
				b.ReportMetric(float64(events.Load())/float64(g), "events/group")
			}
		})
	}
}
