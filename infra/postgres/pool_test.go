package postgres_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/acme/billing/infra/postgres"
)

// TestOpenPoolRefusesASizePgxCannotHold: pgx keeps the pool size in an
// int32, so a larger size is refused with an error, not wrapped round to
// another size (1<<32 + 4 would become a pool of 4).
func TestOpenPoolRefusesASizePgxCannotHold(t *testing.T) {
	t.Parallel()
	if strconv.IntSize < 64 {
		t.Skip("an int holds no size above an int32's here")
	}
	big := int64(1) << 32
	pool, err := postgres.OpenPool(t.Context(), "postgres://billing@127.0.0.1:1/billing", int(big+4))
	if err == nil {
		pool.Close()
		t.Fatalf("OpenPool with size %d: got a pool of %d connections, want an error", big+4, pool.Config().MaxConns)
	}
	if !strings.Contains(err.Error(), "pool size") {
		t.Errorf("OpenPool with size %d: error %q does not name the pool size", big+4, err)
	}
}
