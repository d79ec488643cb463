package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestPoolCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg, false)
	if n, err := testutil.GatherAndCount(reg, "billing_db_pool_max_connections"); err != nil || n != 0 {
		t.Fatalf("before Watch: %d series (%v), want none", n, err)
	}
	m.DBPool.Watch(func() PoolStats {
		return PoolStats{Max: 20, Total: 7, Acquired: 5, Acquires: 1000, EmptyAcquires: 30, EmptyAcquireWait: 1500 * time.Millisecond}
	})
	want := `
# HELP billing_db_pool_acquired_connections Connections of the Postgres pool in use now.
# TYPE billing_db_pool_acquired_connections gauge
billing_db_pool_acquired_connections 5
# HELP billing_db_pool_acquires_total Connections taken from the Postgres pool.
# TYPE billing_db_pool_acquires_total counter
billing_db_pool_acquires_total 1000
# HELP billing_db_pool_connections Connections the Postgres pool holds open now, in use or idle.
# TYPE billing_db_pool_connections gauge
billing_db_pool_connections 7
# HELP billing_db_pool_empty_acquire_wait_seconds_total Time spent waiting by takes that found the Postgres pool empty; its rate is the mean number of waiters.
# TYPE billing_db_pool_empty_acquire_wait_seconds_total counter
billing_db_pool_empty_acquire_wait_seconds_total 1.5
# HELP billing_db_pool_empty_acquires_total Takes from the Postgres pool that found no idle connection and waited for one (or for a new one).
# TYPE billing_db_pool_empty_acquires_total counter
billing_db_pool_empty_acquires_total 30
# HELP billing_db_pool_max_connections Most connections the Postgres pool opens (BILLING_DB_MAX_CONNS).
# TYPE billing_db_pool_max_connections gauge
billing_db_pool_max_connections 20
`
	names := []string{"billing_db_pool_acquired_connections", "billing_db_pool_acquires_total", "billing_db_pool_connections",
		"billing_db_pool_empty_acquire_wait_seconds_total", "billing_db_pool_empty_acquires_total",
		"billing_db_pool_max_connections"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
}
