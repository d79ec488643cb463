package postgres_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/gofrs/uuid/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/testkit/pgtest"
)

// envBenchBig enables the benchmarks that load millions of rows (minutes
// each): BILLING_BENCH_BIG=1 go test -run '^$' -bench . -benchtime=3x …
// (BenchmarkExpireDay reloads a million rows per iteration: give it a
// count, not a duration).
const envBenchBig = "BILLING_BENCH_BIG"

func requireBig(b *testing.B) {
	b.Helper()
	if os.Getenv(envBenchBig) != "1" {
		b.Skipf("loads millions of rows; set %s=1 to run", envBenchBig)
	}
}

// sqlDedupInsert is the dedup part of the reserve statement (the first CTE
// of infra/postgres's sqlReserveGroup), measured alone.
const sqlDedupInsert = `INSERT INTO processed_event (event_id, consumer_group) VALUES ($1, $2)
	ON CONFLICT (event_id, consumer_group) DO NOTHING`

// BenchmarkTryInsert measures one dedup insert in its own transaction (the
// first part of Bill's reserve step) into an empty processed_event and into one
// holding 10 million rows. v7 ids go to today's partition, at the right
// edge of its B-tree; v4 ids (random, what the style guide warns against)
// go to DEFAULT, at random places in its B-tree. The preloaded rows are of
// the same kind and land in the same partition as the measured inserts.
func BenchmarkTryInsert(b *testing.B) {
	sizes := []struct {
		name string
		rows int
	}{{"empty", 0}, {"10M", 10_000_000}}
	kinds := []struct {
		name string
		gen  func() (uuid.UUID, error)
	}{{"v7", uuid.NewV7}, {"v4", uuid.NewV4}}
	for _, size := range sizes {
		for _, kind := range kinds {
			b.Run(size.name+"/"+kind.name, func(b *testing.B) {
				ctx := context.Background()
				if size.rows > 0 {
					requireBig(b)
				}
				pool, _ := pgtest.NewDB(b)
				if size.rows > 0 {
					preload(ctx, b, pool, kind.name, size.rows)
				}
				lsn0 := walLSN(ctx, b, pool)
				n := 0
				for b.Loop() {
					id, err := kind.gen()
					if err != nil {
						b.Fatal(err)
					}
					err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
						tag, err := tx.Exec(ctx, sqlDedupInsert, pgtype.UUID{Bytes: id, Valid: true}, "bench")
						if err == nil && tag.RowsAffected() != 1 {
							err = fmt.Errorf("dedup insert of %s: no row on a new id", id)
						}
						return err
					})
					if err != nil {
						b.Fatal(err)
					}
					n++
				}
				b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "inserts/s")
				b.ReportMetric(walSince(ctx, b, pool, lsn0)/float64(n), "WAL-B/op")
				if size.rows > 0 {
					var idx string
					if err := pool.QueryRow(ctx, `SELECT pg_size_pretty(sum(pg_relation_size(i.indexrelid)))
						FROM pg_index i JOIN pg_inherits h ON h.inhrelid = i.indrelid
						WHERE h.inhparent = 'processed_event'::regclass AND i.indisprimary`).Scan(&idx); err != nil {
						b.Fatal(err)
					}
					b.Logf("primary key indexes after the run: %s", idx)
				}
			})
		}
	}
}

// preload fills processed_event with rows ids of kind: v7 ids spread over
// today so far (today's partition), or v4 ids (DEFAULT). Then it vacuums,
// so the benchmark does not pay for hint bits, and checkpoints.
func preload(ctx context.Context, b *testing.B, pool *pgxpool.Pool, kind string, rows int) {
	b.Helper()
	start := time.Now()
	today := time.Now().UTC().Truncate(24 * time.Hour)
	spanMs := time.Since(today).Milliseconds() - 1000
	const chunk = 1_000_000
	for from := 0; from < rows; from += chunk {
		to := min(from+chunk, rows) - 1
		var err error
		switch kind {
		case "v7":
			// A v7 id made at ms: the timestamp, version 7, variant 10 and
			// random-looking bits from md5.
			_, err = pool.Exec(ctx, `INSERT INTO processed_event (event_id, consumer_group, processed_at)
				SELECT (lpad(to_hex(ms), 12, '0') || '7' || substr(h, 1, 3) || '8' || substr(h, 4, 15))::uuid,
				       'bench', to_timestamp(ms / 1000.0)
				FROM (SELECT $1::bigint + i * $2::bigint / $3::bigint AS ms, md5(i::text) AS h
				      FROM generate_series($4::bigint, $5::bigint) AS i) s`,
				today.UnixMilli(), spanMs, rows, from, to)
		default:
			_, err = pool.Exec(ctx, `INSERT INTO processed_event (event_id, consumer_group)
				SELECT gen_random_uuid(), 'bench' FROM generate_series($1::bigint, $2::bigint)`, from, to)
		}
		if err != nil {
			b.Fatalf("preload %s rows %d-%d: %v", kind, from, to, err)
		}
	}
	if _, err := pool.Exec(ctx, "VACUUM (ANALYZE) processed_event"); err != nil {
		b.Fatalf("vacuum: %v", err)
	}
	if _, err := pool.Exec(ctx, "CHECKPOINT"); err != nil {
		b.Logf("checkpoint (needs a superuser): %v", err)
	}
	b.Logf("preloaded %d %s rows in %v", rows, kind, time.Since(start).Round(time.Second))
}

// BenchmarkExpireDay measures one maintenance pass that expires one day of
// a million rows: by DROP of its partition, or, for rows in DEFAULT, by
// batched DELETE. Each iteration loads the day afresh, untimed; WAL-MB/op
// is the write-ahead log the pass wrote (what replicas and backups carry).
func BenchmarkExpireDay(b *testing.B) {
	const rows = 1_000_000
	for _, how := range []string{"drop", "delete"} {
		b.Run(how, func(b *testing.B) {
			requireBig(b)
			ctx := context.Background()
			day := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -10)
			var walBytes float64
			for range b.N {
				b.StopTimer()
				pool, _ := pgtest.NewDB(b)
				name := "processed_event_p" + day.Format("20060102")
				if how == "drop" {
					if _, err := pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s PARTITION OF processed_event FOR VALUES FROM ('%s') TO ('%s')`,
						name, postgres.UUIDV7Floor(day), postgres.UUIDV7Floor(day.AddDate(0, 0, 1)))); err != nil {
						b.Fatal(err)
					}
				}
				// A day of v7 ids, each processed when it was made.
				if _, err := pool.Exec(ctx, `INSERT INTO processed_event (event_id, consumer_group, processed_at)
					SELECT (lpad(to_hex(ms), 12, '0') || '7' || substr(h, 1, 3) || '8' || substr(h, 4, 15))::uuid,
					       'bench', to_timestamp(ms / 1000.0)
					FROM (SELECT $1::bigint + i * 86400000 / $2::bigint AS ms, md5(i::text) AS h
					      FROM generate_series(0, $2::bigint - 1) AS i) s`, day.UnixMilli(), rows); err != nil {
					b.Fatal(err)
				}
				if _, err := pool.Exec(ctx, "VACUUM (ANALYZE) processed_event"); err != nil {
					b.Fatal(err)
				}
				_, _ = pool.Exec(ctx, "CHECKPOINT")
				m, err := postgres.NewDedupMaintenance(pool, postgres.DedupOptions{Retention: 7 * 24 * time.Hour, PassTimeout: 10 * time.Minute})
				if err != nil {
					b.Fatal(err)
				}
				lsn0 := walLSN(ctx, b, pool)

				b.StartTimer()
				res, err := m.Pass(ctx)
				b.StopTimer()

				if err != nil {
					b.Fatal(err)
				}
				if got := res.RowsDropped + res.RowsDeleted; got != rows {
					b.Fatalf("pass expired %d rows (%+v), want %d", got, res, rows)
				}
				walBytes += walSince(ctx, b, pool, lsn0)
			}
			b.ReportMetric(walBytes/float64(b.N)/(1<<20), "WAL-MB/op")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/rows, "ns/row")
		})
	}
}

// walLSN returns the server's current WAL insert position.
func walLSN(ctx context.Context, b *testing.B, pool *pgxpool.Pool) string {
	b.Helper()
	var lsn string
	if err := pool.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&lsn); err != nil {
		b.Fatal(err)
	}
	return lsn
}

// walSince returns the WAL bytes the server wrote since lsn (by every
// database of the server: run benchmarks alone).
func walSince(ctx context.Context, b *testing.B, pool *pgxpool.Pool, lsn string) float64 {
	b.Helper()
	var n float64
	if err := pool.QueryRow(ctx, "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::pg_lsn)", lsn).Scan(&n); err != nil {
		b.Fatal(err)
	}
	return n
}
