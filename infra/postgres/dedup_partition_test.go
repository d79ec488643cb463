package postgres_test

import (
	"context"
	"errors"
	"io/fs"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gofrs/uuid/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/billing/infra/postgres"
	"github.com/acme/billing/internal/testkit/pgtest"
	"github.com/acme/billing/migrations"
)

// idAt returns a UUIDv7 made at t, from a private generator: gofrs keeps
// the ids of one generator monotonic, so a far-future time given to the
// shared default one would hold every later uuid.NewV7 at that time.
func idAt(t *testing.T, at time.Time) uuid.UUID {
	t.Helper()
	id, err := uuid.NewGen().NewV7AtTime(at)
	if err != nil {
		t.Fatalf("NewV7AtTime(%v) error = %v", at, err)
	}
	return id
}

// insertAt writes a processed_event row as if processed at processedAt.
func insertAt(ctx context.Context, t *testing.T, pool *pgxpool.Pool, id uuid.UUID, group string, processedAt time.Time) {
	t.Helper()
	if _, err := pool.Exec(ctx, `INSERT INTO processed_event (event_id, consumer_group, processed_at) VALUES ($1, $2, $3)`,
		pgtype.UUID{Bytes: id, Valid: true}, group, processedAt); err != nil {
		t.Fatalf("insert %s processed at %v: %v", id, processedAt, err)
	}
}

// partitionOf returns the partition holding (id, group), "" when none does.
func partitionOf(ctx context.Context, t *testing.T, pool *pgxpool.Pool, id uuid.UUID, group string) string {
	t.Helper()
	var name string
	err := pool.QueryRow(ctx, `SELECT tableoid::regclass::text FROM processed_event WHERE event_id = $1 AND consumer_group = $2`,
		pgtype.UUID{Bytes: id, Valid: true}, group).Scan(&name)
	if errors.Is(err, pgx.ErrNoRows) {
		return ""
	}
	if err != nil {
		t.Fatalf("find %s: %v", id, err)
	}
	return name
}

// partitionBounds returns processed_event's partitions and their bounds as
// Postgres prints them.
func partitionBounds(ctx context.Context, t *testing.T, pool *pgxpool.Pool) map[string]string {
	t.Helper()
	rows, _ := pool.Query(ctx, `SELECT c.relname::text, pg_get_expr(c.relpartbound, c.oid)
		FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'processed_event'::regclass`)
	out := map[string]string{}
	var name, bound string
	if _, err := pgx.ForEachRow(rows, []any{&name, &bound}, func() error { out[name] = bound; return nil }); err != nil {
		t.Fatalf("list partitions: %v", err)
	}
	return out
}

func partitionNames(ctx context.Context, t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	var names []string
	for n := range partitionBounds(ctx, t, pool) {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// dayBound is the partition bound clause of the UTC day starting at d, as
// the maintainer and the migration write it.
func dayBound(d time.Time) string {
	return "FOR VALUES FROM ('" + postgres.UUIDV7Floor(d).String() + "') TO ('" + postgres.UUIDV7Floor(d.AddDate(0, 0, 1)).String() + "')"
}

func dayName(d time.Time) string { return "processed_event_p" + d.Format("20060102") }

func utcToday() time.Time { return time.Now().UTC().Truncate(24 * time.Hour) }

// TestDedupSameEventOnTwoDays is the regression test of the style guide's
// partitioning bug: an event processed on one day and delivered again the
// next is a duplicate, wherever its id lands (a day partition or DEFAULT).
func TestDedupSameEventOnTwoDays(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	today := utcToday()
	tests := []struct {
		name          string
		id            uuid.UUID
		wantPartition string
	}{
		{"made today", idAt(t, time.Now()), dayName(today)},
		{"made yesterday", idAt(t, today.Add(-time.Hour)), dayName(today.AddDate(0, 0, -1))},
		{"made a month ago", idAt(t, today.AddDate(0, -1, 0)), "processed_event_default"},
		{"not a v7", uuid.Must(uuid.NewV4()), ""},
	}
	for _, tt := range tests {
		insertAt(ctx, t, pool, tt.id, group, time.Now().Add(-24*time.Hour))
		if got := tryInsert(ctx, t, pool, tt.id, group); got {
			t.Errorf("%s: tryInsert a day after the first = %v, want false (duplicate)", tt.name, got)
		}
		if got := partitionOf(ctx, t, pool, tt.id, group); tt.wantPartition != "" && got != tt.wantPartition {
			t.Errorf("%s: row in %q, want %q", tt.name, got, tt.wantPartition)
		}
	}
	n, err := postgres.NewStore(pool).ProcessedCount(ctx, group)
	if err != nil || n != len(tests) {
		t.Errorf("ProcessedCount() = %d, %v, want %d (one row per event)", n, err, len(tests))
	}
}

// TestStyleGuidePartitioningAdmitsDuplicates shows why the style guide's
// DDL is not used: with PRIMARY KEY (event_id, processed_at) partitioned by
// processed_at, the same event on two days is two rows. The same two
// inserts into billing's table make one.
func TestStyleGuidePartitioningAdmitsDuplicates(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	// The style guide's variant 1, verbatim but for the schema and the
	// partitions (two days instead of a month).
	if _, err := pool.Exec(ctx, `CREATE SCHEMA styleguide;
		CREATE TABLE styleguide.processed_event (
		    event_id       uuid        NOT NULL,
		    consumer_group text        NOT NULL,
		    processed_at   timestamptz NOT NULL DEFAULT now(),
		    PRIMARY KEY (event_id, processed_at)
		) PARTITION BY RANGE (processed_at);
		CREATE TABLE styleguide.processed_event_d1 PARTITION OF styleguide.processed_event
		    FOR VALUES FROM ('2026-06-01') TO ('2026-06-02');
		CREATE TABLE styleguide.processed_event_d2 PARTITION OF styleguide.processed_event
		    FOR VALUES FROM ('2026-06-02') TO ('2026-06-03');`); err != nil {
		t.Fatalf("create the style guide's table: %v", err)
	}
	day1 := time.Date(2026, 6, 1, 23, 0, 0, 0, time.UTC)
	id := idAt(t, day1)
	tests := []struct {
		table    string
		wantRows int
	}{
		{"styleguide.processed_event", 2}, // the bug
		{"public.processed_event", 1},
	}
	for _, tt := range tests {
		inserted := 0
		for _, at := range []time.Time{day1, day1.Add(2 * time.Hour)} {
			// The style guide's dedup insert: ON CONFLICT DO NOTHING.
			tag, err := pool.Exec(ctx, `INSERT INTO `+tt.table+` (event_id, consumer_group, processed_at) VALUES ($1, $2, $3)
				ON CONFLICT DO NOTHING`, pgtype.UUID{Bytes: id, Valid: true}, group, at)
			if err != nil {
				t.Fatalf("%s: insert at %v: %v", tt.table, at, err)
			}
			inserted += int(tag.RowsAffected())
		}
		if inserted != tt.wantRows {
			t.Errorf("%s: the same event on two days inserted %d rows, want %d", tt.table, inserted, tt.wantRows)
		}
	}
}

// TestMigratedSchemaIsPartitioned checks a freshly migrated database:
// processed_event partitioned by RANGE (event_id), the primary key of the
// contract, a DEFAULT partition and the days from yesterday to three ahead.
func TestMigratedSchemaIsPartitioned(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewDB(t)
	checkPartitionedSchema(ctx, t, pool)
}

func checkPartitionedSchema(ctx context.Context, t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	var key, pk string
	if err := pool.QueryRow(ctx, `SELECT pg_get_partkeydef('processed_event'::regclass),
		(SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = 'processed_event'::regclass AND contype = 'p')`).
		Scan(&key, &pk); err != nil {
		t.Fatalf("read partition key: %v", err)
	}
	if key != "RANGE (event_id)" {
		t.Errorf("partition key = %q, want RANGE (event_id)", key)
	}
	if pk != "PRIMARY KEY (event_id, consumer_group)" {
		t.Errorf("primary key = %q, want PRIMARY KEY (event_id, consumer_group)", pk)
	}
	bounds := partitionBounds(ctx, t, pool)
	if got := bounds["processed_event_default"]; got != "DEFAULT" {
		t.Errorf("processed_event_default bound = %q, want DEFAULT", got)
	}
	// The template may have been migrated just before midnight: accept the
	// days of either date.
	today := utcToday()
	for _, base := range []time.Time{today, today.AddDate(0, 0, -1)} {
		ok := true
		for i := -1; i <= 3; i++ {
			d := base.AddDate(0, 0, i)
			ok = ok && bounds[dayName(d)] == dayBound(d)
		}
		if ok {
			return
		}
	}
	t.Errorf("partitions = %v, want %s to %s bounded as %s…", bounds, dayName(today.AddDate(0, 0, -1)), dayName(today.AddDate(0, 0, 3)), dayBound(today))
}

// applyFoundation makes the database the foundation's binary left: 0001
// applied and recorded, nothing else.
func applyFoundation(ctx context.Context, t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	sql, err := fs.ReadFile(migrations.FS, "0001_init.sql")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE schema_migrations (version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, string(sql)); err != nil {
		t.Fatalf("apply 0001: %v", err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO schema_migrations (version) VALUES ('0001_init')`); err != nil {
		t.Fatal(err)
	}
}

// TestMigratePartitionsFoundationDatabase migrates a database made by the
// foundation's migration, with rows in it: every row is kept, lands in its
// day partition or DEFAULT, and still deduplicates.
func TestMigratePartitionsFoundationDatabase(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewEmptyDB(t)
	applyFoundation(ctx, t, pool)
	if _, err := pool.Exec(ctx, `INSERT INTO invoice (order_id, event_id, customer_id, amount, currency, status)
		VALUES ('ord-1', gen_random_uuid(), 'cus-1', 100, 'EUR', 'charged')`); err != nil {
		t.Fatal(err)
	}

	today := utcToday()
	type row struct {
		id            uuid.UUID
		group         string
		processedAt   time.Time
		wantPartition string
	}
	old := idAt(t, today.AddDate(0, 0, -40))
	rows := []row{
		{idAt(t, time.Now()), group, time.Now().Add(-time.Minute), dayName(today)},
		{idAt(t, today.AddDate(0, 0, 2).Add(time.Hour)), group, time.Now(), dayName(today.AddDate(0, 0, 2))}, // a producer's clock ahead
		{old, group, today.AddDate(0, 0, -40), "processed_event_default"},
		{old, "another-group", today.AddDate(0, 0, -39), "processed_event_default"},
		{uuid.Must(uuid.NewV4()), group, time.Now(), ""},
	}
	for _, r := range rows {
		insertAt(ctx, t, pool, r.id, r.group, r.processedAt)
	}
	pending, err := postgres.Pending(ctx, pool)
	if want := embeddedVersions(t)[1:]; err != nil || !slices.Equal(pending, want) {
		t.Fatalf("Pending() = %v, %v, want %v", pending, err, want)
	}

	if err := postgres.Migrate(ctx, pool); err != nil {
		t.Fatalf("Migrate() error = %v", err)
	}

	checkPartitionedSchema(ctx, t, pool)
	if got, want := appliedVersions(ctx, t, pool), embeddedVersions(t); !slices.Equal(got, want) {
		t.Errorf("schema_migrations = %v, want %v", got, want)
	}
	var leftovers int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relname LIKE 'processed_event_0001%'`).Scan(&leftovers); err != nil || leftovers != 0 {
		t.Errorf("relations of the old table left = %d, %v, want 0", leftovers, err)
	}
	var total int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM processed_event`).Scan(&total); err != nil || total != len(rows) {
		t.Errorf("rows after migrating = %d, %v, want %d", total, err, len(rows))
	}
	for _, r := range rows {
		var at time.Time
		if err := pool.QueryRow(ctx, `SELECT processed_at FROM processed_event WHERE event_id = $1 AND consumer_group = $2`,
			pgtype.UUID{Bytes: r.id, Valid: true}, r.group).Scan(&at); err != nil {
			t.Errorf("row %s/%s after migrating: %v", r.id, r.group, err)
			continue
		}
		if !at.Equal(r.processedAt.Truncate(time.Microsecond)) {
			t.Errorf("row %s/%s processed_at = %v, want %v", r.id, r.group, at, r.processedAt)
		}
		if got := partitionOf(ctx, t, pool, r.id, r.group); r.wantPartition != "" && got != r.wantPartition {
			t.Errorf("row %s/%s in %q, want %q", r.id, r.group, got, r.wantPartition)
		}
		if got := tryInsert(ctx, t, pool, r.id, r.group); got {
			t.Errorf("tryInsert(%s, %s) after migrating = true, want false (still a duplicate)", r.id, r.group)
		}
	}
	var invoices int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM invoice`).Scan(&invoices); err != nil || invoices != 1 {
		t.Errorf("invoices after migrating = %d, %v, want 1", invoices, err)
	}
	if err := postgres.Migrate(ctx, pool); err != nil {
		t.Errorf("second Migrate() error = %v", err)
	}
}

// TestMigratePartitionsConcurrentWithInserts: billing of the old version
// keeps inserting while another pod migrates; no insert fails for good and
// none is lost.
func TestMigratePartitionsConcurrentWithInserts(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t)
	pool, _ := pgtest.NewEmptyDB(t)
	applyFoundation(ctx, t, pool)

	const n = 200
	ids := newEventIDs(t, n)
	var (
		wg      sync.WaitGroup
		migrErr error
		started = make(chan struct{})
	)
	wg.Go(func() {
		<-started
		migrErr = postgres.Migrate(ctx, pool)
	})
	for i, id := range ids {
		if i == n/4 {
			close(started)
		}
		// The insert waits while the migration holds its locks, then goes
		// to whichever table is processed_event by then.
		if got := oldDedupInsert(ctx, t, pool, id); !got {
			t.Errorf("dedup insert of %s = false, want true", id)
		}
	}
	wg.Wait()
	if migrErr != nil {
		t.Fatalf("Migrate() error = %v", migrErr)
	}
	var total int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM processed_event`).Scan(&total); err != nil || total != n {
		t.Errorf("rows = %d, %v, want %d", total, err, n)
	}
	for _, id := range ids[:10] {
		if got := oldDedupInsert(ctx, t, pool, id); got {
			t.Errorf("dedup insert of %s again = true, want false", id)
		}
	}
}

// oldDedupInsert is the dedup insert of the releases before migration 0003
// (whose schema Store.Reserve needs), in its own transaction; it reports
// whether the row was new.
func oldDedupInsert(ctx context.Context, t *testing.T, pool *pgxpool.Pool, id uuid.UUID) bool {
	t.Helper()
	tag, err := pool.Exec(ctx, `INSERT INTO processed_event (event_id, consumer_group) VALUES ($1, $2)
		ON CONFLICT (event_id, consumer_group) DO NOTHING`, pgtype.UUID{Bytes: id, Valid: true}, group)
	if err != nil {
		t.Fatalf("dedup insert of %s: %v", id, err)
	}
	return tag.RowsAffected() == 1
}
