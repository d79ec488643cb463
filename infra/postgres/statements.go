package postgres

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/acme/billing/infra/postgres/queries"
)

// statements are the package's SQL statements, one file each in queries/
// (docs/design.md, "SQL in files"), by the name of their file: what the
// store, the relay, the completer, the maintainer and the operator's
// commands send. The migrator's own statements (its lock, its timeouts, its
// catalog reads) stay beside it in migrate.go.
type statements struct {
	// The reserve and settle transactions (store.go), the attempt's take and
	// release.
	reserveOne, reserveGroup, reservePrelude, invoicesForUpdate string
	takeAttempt, releaseAttempt                                 string
	settleOne, settleGroup, settlePrelude                       string
	invoicesAll                                                 string
	// The pending completer (pending.go).
	claimPending, holdStale, pendingStats string
	// The outbox relay (outbox.go).
	flushWAL, claimOutbox, deletePublished, outboxStats string
	// A person's decisions and what they read first (resolve.go, switch.go,
	// invoices.go).
	resolveRead, resolve                     string
	consumeLock, consumeState, consumeRecord string
	listOldest, listNewest, showInvoice      string
	decisionsOf                              string
	// Reconciliation's reads and its record of a run (reconcile.go).
	reconcileInvoicesCreated, reconcileInvoicesOf string
	reconcileRecordRun, reconcileLastRun          string
	// The dedup maintainer (dedup_partitions.go, maintenance.go); those that
	// name a partition are expanded with its name (queries.Statement.Expand).
	dedupLimits, dedupTryLock, dedupPartitions, dedupLockDefault string
	dedupPartitionExists, dedupDeleteExpired                     string
	dedupCreatePartition, dedupMoveRows                          queries.Statement
	dedupAttachPartition, dedupLockPartition                     queries.Statement
	dedupCountPartition, dedupDropPartition                      queries.Statement
}

// stmts are the statements, read once when the package is initialised, as
// a regexp.MustCompile is: the files are embedded, so a file that does not
// parse, a statement without a file or a file without a statement is a
// build that cannot run, which TestStatementsLoad reports by name.
var stmts = mustLoadStatements()

func mustLoadStatements() statements {
	all, err := queries.Load()
	if err == nil {
		var s statements
		if s, err = loadStatements(all); err == nil {
			return s
		}
	}
	panic(fmt.Sprintf("infra/postgres: %v", err))
}

// loadStatements takes each statement from all by its file's name, and
// fails on a name with no file and on a file no statement takes.
func loadStatements(all map[string]queries.Statement) (statements, error) {
	l := loader{all: all, taken: map[string]bool{}}
	s := statements{
		reserveOne:        l.text("reserve_one"),
		reserveGroup:      l.text("reserve_group"),
		reservePrelude:    l.text("reserve_prelude"),
		invoicesForUpdate: l.text("invoices_for_update"),
		takeAttempt:       l.text("take_attempt"),
		releaseAttempt:    l.text("release_attempt"),
		settleOne:         l.text("settle_one"),
		settleGroup:       l.text("settle_group"),
		settlePrelude:     l.text("settle_prelude"),
		invoicesAll:       l.text("invoices_all"),

		claimPending: l.text("claim_pending"),
		holdStale:    l.text("hold_stale"),
		pendingStats: l.text("pending_stats"),

		flushWAL:        l.text("flush_wal"),
		claimOutbox:     l.text("claim_outbox"),
		deletePublished: l.text("delete_published"),
		outboxStats:     l.text("outbox_stats"),

		resolveRead:   l.text("resolve_read"),
		resolve:       l.text("resolve"),
		consumeLock:   l.text("consume_lock"),
		consumeState:  l.text("consume_state"),
		consumeRecord: l.text("consume_record"),
		listOldest:    l.text("list_oldest"),
		listNewest:    l.text("list_newest"),
		showInvoice:   l.text("show_invoice"),
		decisionsOf:   l.text("decisions_of"),

		reconcileInvoicesCreated: l.text("reconcile_invoices_created"),
		reconcileInvoicesOf:      l.text("reconcile_invoices_of"),
		reconcileRecordRun:       l.text("reconcile_record_run"),
		reconcileLastRun:         l.text("reconcile_last_run"),

		dedupLimits:          l.text("dedup_limits"),
		dedupTryLock:         l.text("dedup_try_lock"),
		dedupPartitions:      l.text("dedup_partitions"),
		dedupLockDefault:     l.text("dedup_lock_default"),
		dedupPartitionExists: l.text("dedup_partition_exists"),
		dedupDeleteExpired:   l.text("dedup_delete_expired"),
		dedupCreatePartition: l.vars("dedup_create_partition"),
		dedupMoveRows:        l.vars("dedup_move_rows"),
		dedupAttachPartition: l.vars("dedup_attach_partition"),
		dedupLockPartition:   l.vars("dedup_lock_partition"),
		dedupCountPartition:  l.vars("dedup_count_partition"),
		dedupDropPartition:   l.vars("dedup_drop_partition"),
	}
	for _, name := range slices.Sorted(maps.Keys(all)) {
		if !l.taken[name] {
			l.errs = append(l.errs, fmt.Errorf("queries/%s.sql: no statement of infra/postgres takes it", name))
		}
	}
	return s, errors.Join(l.errs...)
}

// loader takes statements by name and remembers which it took.
type loader struct {
	all   map[string]queries.Statement
	taken map[string]bool
	errs  []error
}

// vars takes a statement with psql-style variables, to be expanded.
func (l *loader) vars(name string) queries.Statement {
	st, ok := l.all[name]
	if !ok {
		l.errs = append(l.errs, fmt.Errorf("statement %s: no file queries/%s.sql", name, name))
	}
	if l.taken[name] {
		l.errs = append(l.errs, fmt.Errorf("statement %s: taken twice", name))
	}
	l.taken[name] = true
	return st
}

// text takes a statement sent as it is, which has no variables.
func (l *loader) text(name string) string {
	st := l.vars(name)
	if len(st.Vars) > 0 {
		l.errs = append(l.errs, fmt.Errorf("statement %s: variables %v to expand: take it with vars", name, st.Vars))
	}
	return st.SQL
}
