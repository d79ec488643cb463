package pgtest

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/billing/infra/postgres"
)

func TestMain(m *testing.M) { Main(m) }

func currentDB(ctx context.Context, t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var name string
	if err := pool.QueryRow(ctx, "SELECT current_database()").Scan(&name); err != nil {
		t.Fatal(err)
	}
	return name
}

func dbExists(ctx context.Context, t *testing.T, name string) bool {
	t.Helper()
	admin, _, err := server.ensureServer(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ok bool
	if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

func TestNewDBIsMigratedIsolatedAndDropped(t *testing.T) {
	t.Parallel()
	ctx := Context(t)
	var names [2]string
	t.Run("use", func(t *testing.T) {
		poolA, dsnA := NewDB(t)
		poolB, _ := NewDB(t)
		names[0], names[1] = currentDB(ctx, t, poolA), currentDB(ctx, t, poolB)
		if names[0] == names[1] {
			t.Fatalf("two NewDB calls share database %s", names[0])
		}
		pending, err := postgres.Pending(ctx, poolA)
		if err != nil || len(pending) != 0 {
			t.Errorf("Pending() = %v, %v, want none", pending, err)
		}
		if _, err := poolA.Exec(ctx, "INSERT INTO processed_event (event_id, consumer_group) VALUES (gen_random_uuid(), 'g')"); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := poolB.QueryRow(ctx, "SELECT count(*) FROM processed_event").Scan(&n); err != nil || n != 0 {
			t.Errorf("rows seen by the other database = %d, %v, want 0", n, err)
		}
		// The DSN reaches the same database as the pool.
		other, err := postgres.NewPool(ctx, dsnA, 1)
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		if got := currentDB(ctx, t, other); got != names[0] {
			t.Errorf("DSN connects to %s, want %s", got, names[0])
		}
	})
	for _, name := range names {
		if dbExists(ctx, t, name) {
			t.Errorf("database %s still exists after its test ended", name)
		}
	}
}

func TestNewDBConcurrent(t *testing.T) {
	t.Parallel()
	const n = 8
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			t.Run("db", func(t *testing.T) {
				// Each of these makes a database from the same template at
				// about the same moment.
				pool, _ := NewDB(t)
				if err := pool.Ping(context.Background()); err != nil {
					t.Errorf("db %d: %v", i, err)
				}
			})
		})
	}
	wg.Wait()
}

func TestNewEmptyDB(t *testing.T) {
	t.Parallel()
	ctx := Context(t)
	pool, _ := NewEmptyDB(t)
	pending, err := postgres.Pending(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if len(pending) == 0 {
		t.Error("Pending() on NewEmptyDB = none, want every migration")
	}
}

func TestNewCluster(t *testing.T) {
	t.Parallel()
	ctx := Context(t)
	c := NewCluster(t)
	pool, err := postgres.NewPool(ctx, c.DSN("postgres"), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if c.Port() == 0 {
		t.Error("Port() = 0")
	}
	server.mu.Lock() // the shared cluster may be starting for a parallel test
	shared := server.cluster
	server.mu.Unlock()
	if shared == c {
		t.Error("NewCluster returned the shared cluster, want a private one")
	}
}

func TestWithDatabase(t *testing.T) {
	t.Parallel()
	tests := []struct{ dsn, want string }{
		{"postgres://u:p@h:5432/postgres?sslmode=disable", "postgres://u:p@h:5432/x?sslmode=disable"},
		{"postgresql://h/", "postgresql://h/x"},
		{"host=h user=u dbname=postgres", "host=h user=u dbname=postgres dbname=x"},
	}
	for _, tt := range tests {
		got, err := withDatabase(tt.dsn, "x")
		if err != nil || got != tt.want {
			t.Errorf("withDatabase(%q) = %q, %v, want %q", tt.dsn, got, err, tt.want)
		}
	}
}
