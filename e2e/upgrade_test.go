package e2e

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gofrs/uuid/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/billing/internal/testkit/pgtest"
	"github.com/acme/billing/internal/testkit/poll"
	"github.com/acme/billing/internal/version"
)

// The upgrade's shape. The payment timeout is short so that an attempt's
// life (the timeout plus order.AttemptMargin), which a release waits out
// after the last member of a release it is not safe beside left the group,
// costs the rollout seconds rather than a quarter of a minute.
const (
	upgradeRate       = 250             // records a second, every kind together
	upgradeTimeout    = 3 * time.Second // BILLING_PAYMENT_TIMEOUT
	upgradeResume     = 4 * time.Second // BILLING_PENDING_RESUME_AFTER
	reportHold        = 8 * time.Second // how long the REPEATABLE READ report holds invoice during the migration
	probeBound        = 3 * time.Second // the longest a probe statement may wait (docs/interface.md §10: locks of at most 2 s)
	rollbackFor       = 15 * time.Second
	stall             = 45 * time.Second // no progress for this long fails a wait
	workBeforeMigrate = 400              // final invoices the previous release makes before the migration
	workPerStep       = 150              // events a fleet handles after each change before the next
)

// TestUpgradeMovesNoMoney is docs/interface.md §10 as an operator meets it, from
// each previous release CHANGELOG.md names (releases_test.go): the
// previous release's schema and two of its processes, one database and one
// consumer group, under a steady load of new orders, re-sends, new event
// ids for orders already billed, refusals (404, nothing stored) and their
// reopens, 422s, slow calls, calls that outlive the payment timeout and
// bursts of 503s. This release's `billing migrate` runs while a REPEATABLE
// READ report holds invoice; a probe writes beside it. The processes are
// then replaced one at a time as a RollingUpdate does (stop one, start one,
// wait until it is ready), one is rolled back to the previous release for
// a while and forward again (where a rollback to that release is safe;
// where it is not, `billing migrate` must have refused without
// --allow-no-rollback), and the load stops. At the end: no order charged
// twice (but one that a release without a fence charged twice by itself,
// both moves made before migration 0006 could refuse them: ownRace, logged
// and counted), no money without a charged invoice, every record billed, a
// duplicate or in the DLQ, every transition made once the migrations ran
// published once with its §9 id, and every process exited 0 on SIGTERM.
//
// A test table on invoice records every transition with its row, whoever
// writes it (a trigger of the test's own, installed before the previous
// release starts): that is what the invoice topic is checked against.
func TestUpgradeMovesNoMoney(t *testing.T) {
	t.Parallel()
	prev := previousReleases(t)
	bins := make([]string, len(prev))
	for i, r := range prev {
		bins[i] = buildRelease(t, r)
	}
	for i, r := range prev {
		t.Run("from_v"+r.Version, func(t *testing.T) {
			// Side by side: most of a run waits (for a back-off, an
			// attempt's life, a group to rebalance), little of it computes.
			t.Parallel()
			upgradeFrom(t, r, bins[i])
		})
	}
}

// upgrade is one run of the upgrade: its environment and what it measured.
type upgrade struct {
	t      *testing.T
	e      *env
	db     *pgxpool.Pool
	from   release
	oldBin string
	script *gatewayScript
	began  time.Time
	steps  []string // what happened when, for the report
	// oldEnv is the previous release's own configuration, after e's.
	oldEnv []string
}

func (u *upgrade) step(format string, args ...any) {
	now := time.Now()
	u.steps = append(u.steps, fmt.Sprintf("%6.1fs %s ", now.Sub(u.began).Seconds(), now.Format("15:04:05.000"))+fmt.Sprintf(format, args...))
}

func upgradeFrom(t *testing.T, from release, oldBin string) {
	pool, dsn := pgtest.NewEmptyDB(t)
	e := newEnvOn(t, pool, dsn)
	e.extra = []string{
		"BILLING_PAYMENT_TIMEOUT=" + upgradeTimeout.String(),
		"BILLING_PENDING_RESUME_AFTER=" + upgradeResume.String(),
	}
	u := &upgrade{t: t, e: e, db: pool, from: from, oldBin: oldBin, script: newGatewayScript(upgradeTimeout), began: time.Now()}
	e.gw.SetFault(u.script.fault)
	defer func() { t.Logf("upgrade from %s:\n%s", from, strings.Join(u.steps, "\n")) }()

	// The previous release: its schema, the test's record of transitions,
	// two processes under load.
	if out, err := u.run(oldBin, "migrate"); err != nil {
		t.Fatalf("v%s's billing migrate: %v\n%s", from.Version, err, out)
	}
	u.installAudit()
	prev := u.schemaFacts()
	u.step("v%s's schema: outbox %v, fence %v", from.Version, prev.outbox, prev.fence)
	if !prev.fence {
		// A release without a fence has a completer that takes no attempt:
		// it resumes an invoice its consumer may still be sending, and
		// charges twice when the two race (1.0.0's own bug, which 1.1.0's
		// fence fixed; CHANGELOG.md, "From 1.0.0"). Its default resume age
		// (15 min) keeps them apart; this test's 4 s would test that bug,
		// not the upgrade, so it runs with its default.
		u.oldEnv = []string{"BILLING_PENDING_RESUME_AFTER=15m"}
	}
	fleet := &fleet{u: u}
	old := []*member{fleet.start("old-1", from.Version, oldBin), fleet.start("old-2", from.Version, oldBin)}
	for _, m := range old {
		fleet.waitReady(m)
	}
	ld := startLoad(t, e.brokers, e.topic, u.script, upgradeRate, "ord", uint64(time.Now().UnixNano()))
	u.waitFinal(workBeforeMigrate)
	u.step("v%s billed %d invoices under load", from.Version, workBeforeMigrate)

	// This release's migrations, beside a report and a probe.
	mig := u.migrate(prev.fence)

	// The rollout: one process at a time, as a RollingUpdate with
	// maxUnavailable 1 replaces pods.
	var news []*member
	for i, o := range old {
		fleet.stop(o)
		n := fleet.start(fmt.Sprintf("new-%d", i+1), version.Release, binary)
		fleet.waitReady(n)
		news = append(news, n)
	}
	fleet.waitWorking(news, workPerStep)
	u.step("rolled out: v%s handles events", version.Release)

	// A rollback of one process, for a while, and forward again.
	if prev.fence {
		fleet.stop(news[1])
		back := fleet.start("rollback", from.Version, oldBin)
		fleet.waitReady(back)
		rolled := time.Now()
		poll.UntilProgress(t, "the rolled back process to bill for a while", stall, u.finalCount, func() bool {
			return time.Since(rolled) >= rollbackFor && back.events() >= workPerStep
		})
		fleet.stop(back)
		news[1] = fleet.start("new-3", version.Release, binary)
		fleet.waitReady(news[1])
		fleet.waitWorking(news, workPerStep)
		u.step("rolled forward again")
	} else {
		u.step("no rollback leg: v%s has no fence of its own, rolling back to it is not safe", from.Version)
	}

	// The load stops; everything it sent is billed, routed or published.
	sent, orders := ld.finish()
	u.step("load stopped: %d records", len(sent))
	var last drainState
	logged := time.Now()
	poll.UntilProgress(t, "every record consumed, no invoice pending, the outbox empty", u.drainStall(prev),
		func() drainState {
			last = u.drainState()
			if time.Since(logged) >= 5*time.Second {
				note := ""
				if last.lag == 0 {
					note = u.pendingNote()
				}
				u.step("draining: %+v %s", last, note)
				logged = time.Now()
			}
			return last
		},
		func() bool { return last.done() })
	u.step("drained: %+v", last)
	for _, m := range news {
		fleet.stop(m)
	}

	u.check(checkInput{sent: sent, orders: orders, prev: prev, mig: mig, fleet: fleet})
}

// drainStall is how long the drain may go without progress. The attempts
// migration 0006 records for a release without a fence (it records none
// of its own) last invoice_legacy_attempt_life(), longer than any its
// configuration allows: the new release's pods wait them out, and a fast
// rollout leaves some alive with nothing else left to do.
func (u *upgrade) drainStall(prev schemaFacts) time.Duration {
	u.t.Helper()
	if prev.fence {
		return stall
	}
	var life float64
	if err := u.db.QueryRow(context.Background(), `SELECT extract(epoch FROM invoice_legacy_attempt_life())::float8`).Scan(&life); err != nil {
		u.t.Fatal(err)
	}
	return max(stall, time.Duration(life*float64(time.Second))+stall/3)
}

// run runs bin with args to its end and returns its output.
func (u *upgrade) run(bin string, args ...string) (string, error) {
	u.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = u.e.environ()
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// schemaFacts is what the previous release's schema says of it.
type schemaFacts struct {
	outbox bool // it publishes its own transitions (migration 0005)
	fence  bool // it takes attempts (migration 0004): rolling back to it is safe
}

func (u *upgrade) schemaFacts() schemaFacts {
	u.t.Helper()
	var f schemaFacts
	err := u.db.QueryRow(context.Background(), `SELECT to_regclass('invoice_outbox') IS NOT NULL,
		EXISTS (SELECT 1 FROM information_schema.columns WHERE table_name = 'invoice' AND column_name = 'attempt_id')`).
		Scan(&f.outbox, &f.fence)
	if err != nil {
		u.t.Fatal(err)
	}
	return f
}

// finalCount is how many invoices of the load are no longer pending.
func (u *upgrade) finalCount() int {
	var n int
	if err := u.db.QueryRow(context.Background(),
		`SELECT count(*) FROM invoice WHERE status <> 'pending' AND order_id NOT LIKE 'probe-%'`).Scan(&n); err != nil {
		return -1
	}
	return n
}

// waitFinal waits until n invoices of the load are final.
func (u *upgrade) waitFinal(n int) {
	u.t.Helper()
	poll.UntilProgress(u.t, fmt.Sprintf("%d final invoices", n), stall, u.finalCount, func() bool { return u.finalCount() >= n })
}

// dbNow is Postgres's clock, which the audit's times are on.
func (u *upgrade) dbNow() time.Time {
	u.t.Helper()
	var now time.Time
	if err := u.db.QueryRow(context.Background(), `SELECT clock_timestamp()`).Scan(&now); err != nil {
		u.t.Fatal(err)
	}
	return now
}

// migration is what the migration step measured.
type migration struct {
	start, end    time.Time     // Postgres's clock, just before the first `billing migrate` and just after the last
	runs          []string      // each run: arguments, exit, duration
	longestProbe  time.Duration // the longest probe statement
	probeCount    int
	refused       bool // `billing migrate` refused without --allow-no-rollback
	reportHeldFor time.Duration
}

// migrate runs this release's `billing migrate` while a REPEATABLE READ
// report holds invoice for reportHold and a probe inserts, updates and
// reads invoice rows continuously. From a release that rolling back to is
// not safe (rollbackSafe false), the first run must refuse without
// --allow-no-rollback, and the run with it apply the migrations; otherwise
// the first run must apply them. Either way the run that applies them
// must exit 0 the first time.
func (u *upgrade) migrate(rollbackSafe bool) migration {
	t := u.t
	t.Helper()
	ctx := context.Background()
	var mig migration

	report, err := pgx.Connect(ctx, u.e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer report.Close(ctx)
	tx, err := report.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM invoice`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	reportStart := time.Now()
	// The report is the scenario: a reader that keeps invoice's lock this
	// long whatever the migration does, so its end is a timer, not a wait
	// for something.
	reportDone := make(chan error, 1)
	time.AfterFunc(reportHold, func() { reportDone <- tx.Commit(ctx) })

	pr := startProbe(t, u.e.dsn)
	mig.start = u.dbNow()
	u.step("migration: report holds invoice (%d rows read), probe writing", n)

	apply := func(args ...string) error {
		began := time.Now()
		out, err := u.run(binary, args...)
		mig.runs = append(mig.runs, fmt.Sprintf("billing %s: %v after %v", strings.Join(args, " "), exitOf(err),
			time.Since(began).Round(10*time.Millisecond)))
		if err != nil {
			t.Logf("billing %s: %v\n%s", strings.Join(args, " "), err, tail(out, 2048))
		}
		return errOut(err, out)
	}
	applied := false
	if !rollbackSafe {
		err := apply("migrate")
		switch {
		case err == nil:
			t.Errorf("billing migrate applied v%s's migrations over v%s's schema without --allow-no-rollback: "+
				"rolling back to v%s is not safe (it has no fence of its own), so it must refuse", version.Release, u.from.Version, u.from.Version)
			applied = true
		case strings.Contains(err.Error(), "--allow-no-rollback"):
			mig.refused = true
			if err := apply("migrate", "--allow-no-rollback"); err != nil {
				t.Errorf("the first billing migrate --allow-no-rollback failed, want exit 0: %v", err)
			} else {
				applied = true
			}
		default:
			t.Errorf("billing migrate over v%s's schema failed without naming --allow-no-rollback, want a refusal that names it: %v", u.from.Version, err)
		}
	} else if err := apply("migrate"); err != nil {
		t.Errorf("the first billing migrate failed, want exit 0: %v", err)
	} else {
		applied = true
	}
	// What an init container does next: run again, a few times. The rest
	// of the upgrade still says what it can.
	args := []string{"migrate"}
	if mig.refused {
		args = append(args, "--allow-no-rollback")
	}
	for run := 2; !applied; run++ {
		err := apply(args...)
		applied = err == nil
		if !applied && run == 5 {
			t.Fatalf("billing %s failed %d times: %v", strings.Join(args, " "), run, err)
		}
	}
	mig.end = u.dbNow()
	if err := <-reportDone; err != nil {
		t.Errorf("the report's transaction: %v", err)
	}
	mig.reportHeldFor = time.Since(reportStart)
	var probeErr error
	mig.longestProbe, mig.probeCount, probeErr = pr.finish()
	if probeErr != nil {
		t.Errorf("the probe stopped after %d statements: %v", mig.probeCount, probeErr)
	}
	u.step("migrated: %s; report held %v; %d probe statements, the longest %v",
		strings.Join(mig.runs, "; "), mig.reportHeldFor.Round(10*time.Millisecond), mig.probeCount, mig.longestProbe.Round(time.Millisecond))
	if mig.longestProbe > probeBound {
		t.Errorf("a probe statement on invoice waited %v during the migration, want at most %v", mig.longestProbe.Round(time.Millisecond), probeBound)
	}
	return mig
}

// exitOf names how a command ended.
func exitOf(err error) string {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return "exit 0"
	case errors.As(err, &ee):
		return fmt.Sprintf("exit %d", ee.ExitCode())
	default:
		return err.Error()
	}
}

// errOut is err with the command's output in its text, nil when err is.
func errOut(err error, out string) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %s", exitOf(err), strings.TrimSpace(tail(out, 1024)))
}

// probe is a writer of billing's kind beside the migration: it inserts an
// invoice of its own (declined: final, so no path ever sends it), updates
// it and reads it, over and over, and keeps the longest statement.
type probe struct {
	stop    chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	longest time.Duration
	count   int
	err     error
}

func startProbe(t *testing.T, dsn string) *probe {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	p := &probe{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		defer conn.Close(context.Background())
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			id := fmt.Sprintf("probe-%06d", i)
			key, err := uuid.NewV7()
			if err == nil {
				err = p.statement(conn, `INSERT INTO invoice (order_id, event_id, customer_id, amount, currency, status)
					VALUES ($1, $2, 'probe', 1, 'EUR', 'declined')`, id, key)
			}
			if err == nil {
				err = p.statement(conn, `UPDATE invoice SET amount = amount + 1 WHERE order_id = $1`, id)
			}
			if err == nil {
				err = p.statement(conn, `SELECT status FROM invoice WHERE order_id = $1`, id)
			}
			if err != nil {
				p.mu.Lock()
				p.err = err
				p.mu.Unlock()
				return
			}
			select {
			case <-p.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return p
}

// statement runs one probe statement and keeps its duration.
func (p *probe) statement(conn *pgx.Conn, sql string, args ...any) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	began := time.Now()
	_, err := conn.Exec(ctx, sql, args...)
	took := time.Since(began)
	p.mu.Lock()
	p.longest, p.count = max(p.longest, took), p.count+1
	p.mu.Unlock()
	if err != nil {
		return fmt.Errorf("probe %q: %w", strings.Fields(sql)[0], err)
	}
	return nil
}

// finish stops the probe and returns its longest statement, its count,
// and the error that stopped it early, if one did.
func (p *probe) finish() (time.Duration, int, error) {
	close(p.stop)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.longest, p.count, p.err
}

// drainState is where the end of the upgrade stands: what it waits for,
// and what moves while it gets there.
type drainState struct {
	final, pending, outbox int
	lag, committed         int64 // over the main topic and the tiers
	lagErr                 bool
}

func (d drainState) done() bool { return d.pending == 0 && d.outbox == 0 && d.lag == 0 && !d.lagErr }

func (u *upgrade) drainState() drainState {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var d drainState
	err := u.db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status <> 'pending'), count(*) FILTER (WHERE status = 'pending')
		FROM invoice WHERE order_id NOT LIKE 'probe-%'`).Scan(&d.final, &d.pending)
	if err != nil {
		d.pending = -1
	}
	// The outbox as this release counts what waits in it.
	if st, err := u.e.store.OutboxStats(ctx); err != nil {
		d.outbox = -1
	} else {
		d.outbox = st.Pending
	}
	for g, tp := range map[string]string{u.e.group: u.e.topic, u.e.retryGroup(1): u.e.retryTopic(1),
		u.e.retryGroup(2): u.e.retryTopic(2)} {
		pos, err := u.e.kc.Positions(ctx, g, tp)
		if err != nil {
			d.lagErr = true
			continue
		}
		for _, p := range pos {
			d.lag += p.Lag
			d.committed += p.Committed
		}
	}
	return d
}

// pendingNote describes a few of the invoices still pending, with what
// the gateway answered for their orders: what a drain that stalls waits on.
func (u *upgrade) pendingNote() string {
	rows, _ := u.db.Query(context.Background(), `SELECT order_id, event_id::text,
			date_trunc('second', clock_timestamp() - updated_at)::text,
			coalesce(date_trunc('second', clock_timestamp() - key_sent_at)::text, 'never'),
			coalesce(date_trunc('second', attempt_until - clock_timestamp())::text, 'none')
		FROM invoice WHERE status = 'pending' ORDER BY updated_at LIMIT 3`)
	var notes []string
	var id, key, age, sent, attempt string
	_, _ = pgx.ForEachRow(rows, []any{&id, &key, &age, &sent, &attempt}, func() error {
		var answers []string
		for _, c := range u.e.gw.Calls() {
			if c.OrderID == id {
				answers = append(answers, fmt.Sprintf("%d %.0fs ago", c.Status, time.Since(c.Time).Seconds()))
			}
		}
		notes = append(notes, fmt.Sprintf("%s under %s: updated %s ago, key sent %s ago, attempt %s left; gateway %v",
			id, key, age, sent, attempt, answers))
		return nil
	})
	return strings.Join(notes, "; ")
}
