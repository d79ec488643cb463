package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gofrs/uuid/v5"
	"github.com/jackc/pgx/v5"

	"github.com/acme/billing/adapters/in/kafka/wire"
	"github.com/acme/billing/core/order"
	"github.com/acme/billing/internal/testkit/gatewaystub"
	"github.com/acme/billing/internal/testkit/kafkatest"
)

// auditSQL records every transition of an invoice, whoever writes it
// (every release, a person's psql): the row as it is after the statement,
// when, and what it was before. It is the test's own and is installed on
// the previous release's schema, before any of its processes starts; an
// AFTER trigger sees the row as every BEFORE trigger left it, and rows of
// a rolled back transaction go with it.
const auditSQL = `
CREATE TABLE upgrade_audit (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at         timestamptz NOT NULL DEFAULT clock_timestamp(),
    old_status text        NULL,
    old_key    uuid        NULL,
    row        jsonb       NOT NULL
);
CREATE FUNCTION upgrade_audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO upgrade_audit (row) VALUES (to_jsonb(NEW));
    ELSE
        INSERT INTO upgrade_audit (old_status, old_key, row) VALUES (OLD.status, OLD.event_id, to_jsonb(NEW));
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER zz_upgrade_audit_insert AFTER INSERT ON invoice FOR EACH ROW EXECUTE FUNCTION upgrade_audit();
CREATE TRIGGER zz_upgrade_audit_update AFTER UPDATE ON invoice FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.event_id IS DISTINCT FROM NEW.event_id)
    EXECUTE FUNCTION upgrade_audit();
`

func (u *upgrade) installAudit() {
	u.t.Helper()
	if _, err := u.db.Exec(context.Background(), auditSQL); err != nil {
		u.t.Fatalf("install the test's audit of invoice: %v", err)
	}
}

// transition is one change of an invoice's status or key, as the audit
// recorded it.
type transition struct {
	id        int64
	at        time.Time
	orderID   string
	oldStatus order.InvoiceStatus // "" for the insert
	oldKey    uuid.UUID
	status    order.InvoiceStatus
	key       uuid.UUID
	reopens   *int // nil before the schema had the column
	amount    int64
	currency  string
	chargeID  string
}

// final reports whether t is a transition that §9 publishes: into
// charged, declined, rejected or held.
func (t transition) final() bool { return t.status != order.StatusPending }

// reopen reports whether t took a decided invoice back to pending.
func (t transition) reopen() bool {
	return t.status == order.StatusPending && (t.oldStatus == order.StatusRejected || t.oldStatus == order.StatusHeld)
}

// eventID is the §9 id of t (order.InvoiceEventID).
func (t transition) eventID() uuid.UUID {
	r := 0
	if t.reopens != nil {
		r = *t.reopens
	}
	return order.InvoiceEventID(t.orderID, t.key, t.status, r)
}

func (u *upgrade) transitions() []transition {
	u.t.Helper()
	ctx := context.Background()
	rows, _ := u.db.Query(ctx, `SELECT id, at, row->>'order_id', coalesce(old_status, ''), coalesce(old_key, '00000000-0000-0000-0000-000000000000'),
			row->>'status', (row->>'event_id')::uuid, (row->>'reopens')::int, (row->>'amount')::bigint, row->>'currency', coalesce(row->>'charge_id', '')
		FROM upgrade_audit WHERE row->>'order_id' NOT LIKE 'probe-%' ORDER BY id`)
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (transition, error) {
		var tr transition
		var oldStatus, status string
		err := r.Scan(&tr.id, &tr.at, &tr.orderID, &oldStatus, &tr.oldKey, &status, &tr.key, &tr.reopens, &tr.amount, &tr.currency, &tr.chargeID)
		tr.oldStatus, tr.status = order.InvoiceStatus(oldStatus), order.InvoiceStatus(status)
		return tr, err
	})
	if err != nil {
		u.t.Fatalf("read the audit: %v", err)
	}
	return out
}

// finalInvoice is an invoice of the load at the end.
type finalInvoice struct {
	status    order.InvoiceStatus
	key       uuid.UUID
	chargeID  string
	keySentAt *time.Time
}

func (u *upgrade) finalInvoices() map[string]finalInvoice {
	u.t.Helper()
	rows, _ := u.db.Query(context.Background(),
		`SELECT order_id, status, event_id, coalesce(charge_id, ''), key_sent_at FROM invoice WHERE order_id NOT LIKE 'probe-%'`)
	out := map[string]finalInvoice{}
	var id, status string
	var inv finalInvoice
	_, err := pgx.ForEachRow(rows, []any{&id, &status, &inv.key, &inv.chargeID, &inv.keySentAt}, func() error {
		inv.status = order.InvoiceStatus(status)
		out[id] = inv
		return nil
	})
	if err != nil {
		u.t.Fatalf("read the invoices: %v", err)
	}
	return out
}

// publishedEvent is one record of the invoice topic.
type publishedEvent struct {
	EventID        string `json:"event_id"`
	EventType      string `json:"event_type"`
	OrderID        string `json:"order_id"`
	Amount         int64  `json:"amount"`
	Currency       string `json:"currency"`
	IdempotencyKey string `json:"idempotency_key"`
	ChargeID       string `json:"charge_id"`
	key            string
}

// checkInput is what the checks compare.
type checkInput struct {
	sent   []sentRecord
	orders map[string]*loadOrder
	prev   schemaFacts
	mig    migration
	fleet  *fleet
}

// check is the end of the upgrade: money, events, invoice events.
func (u *upgrade) check(in checkInput) {
	t := u.t
	t.Helper()
	invs := u.finalInvoices()
	trs := u.transitions()
	charges := u.e.gw.Charges()
	calls := u.e.gw.Calls()

	// Money: no order charged twice, no money without its charged invoice,
	// except a double charge the previous release made by itself before
	// this release's schema could stop it (ownRace).
	guarded := u.guardedSince()
	byOrder := map[string]int{}
	double, own := 0, 0
	for _, c := range charges {
		byOrder[c.OrderID]++
		inv, ok := invs[c.OrderID]
		alone := !in.prev.fence && ok && ownRace(trs, c.OrderID, inv.key, guarded)
		if byOrder[c.OrderID] == 2 {
			double++
			if alone {
				own++
				t.Logf("order %s charged twice by v%s alone: its rejection and the reopen under a second key were made before "+
					"this release's triggers (migration 0006, applied %s), so v%s's own unfenced race, not the upgrade: %s",
					c.OrderID, u.from.Version, guarded.Format("15:04:05.000"), u.from.Version, story(c.OrderID, calls, trs))
			} else {
				t.Errorf("order %s charged twice: %s", c.OrderID, story(c.OrderID, calls, trs))
			}
		}
		if (!ok || inv.status != order.StatusCharged || inv.key.String() != c.Key) && !alone {
			t.Errorf("order %s: money moved under key %s, but its invoice is %s under %s", c.OrderID, c.Key, inv.status, inv.key)
		}
	}
	statuses := map[order.InvoiceStatus]int{}
	for id, inv := range invs {
		statuses[inv.status]++
		o, ok := in.orders[id]
		if !ok {
			t.Errorf("invoice for %s, an order the load never sent", id)
			continue
		}
		if inv.status == order.StatusCharged && byOrder[id] == 0 {
			t.Errorf("order %s: invoice charged under %s, and the gateway charged nothing", id, inv.key)
		}
		if want := wantStatus(o.kind); !slices.Contains(want, inv.status) {
			t.Errorf("order %s (%s): invoice %s, want %v", id, o.kind, inv.status, want)
		}
	}
	for id := range in.orders {
		if _, ok := invs[id]; !ok {
			t.Errorf("order %s was sent and has no invoice", id)
		}
	}

	// Events: each record billed, a duplicate (its dedup row) or in the DLQ.
	lost := u.lostEvents(in.sent)

	// Invoice events.
	pub := u.checkPublished(trs, in)

	// key_sent_at, whoever sent the key: every invoice whose key was first
	// sent after the migrations says when.
	firstSent := map[string]time.Time{}
	for _, c := range calls {
		if f, ok := firstSent[c.Key]; !ok || c.Time.Before(f) {
			firstSent[c.Key] = c.Time
		}
	}
	noSentAt := 0
	for id, inv := range invs {
		if f, ok := firstSent[inv.key.String()]; ok && f.After(in.mig.end) && inv.keySentAt == nil {
			noSentAt++
			if noSentAt <= 10 {
				t.Errorf("order %s: key %s first sent at %v, after the migrations, and key_sent_at is empty", id, inv.key, f.Format(time.RFC3339Nano))
			}
		}
	}
	if noSentAt > 10 {
		t.Errorf("%d invoices whose key was sent after the migrations have no key_sent_at", noSentAt)
	}

	kinds := map[string]int{}
	for _, s := range in.sent {
		kinds[s.what]++
	}
	orderKinds := map[orderKind]int{}
	for _, o := range in.orders {
		orderKinds[o.kind]++
	}
	var gates []string
	for _, m := range in.fleet.members {
		gates = append(gates, fmt.Sprintf("%s (v%s) %s", m.name, m.release, m.gate()))
	}
	t.Logf("upgrade from %s: %d records (%v) for %d orders (%v); %d gateway calls, %d charges, %d orders charged twice "+
		"(%d by the previous release alone before migration 0006); "+
		"invoices %v; %d records unaccounted for; %d transitions to a final status (%d before the migrations, %d during, %d after), %s; "+
		"migration: %s, report held %v, %d probe statements, the longest %v; pauses: %s",
		u.from, len(in.sent), kinds, len(in.orders), orderKinds, len(calls), len(charges), double, own,
		statuses, lost, pub.before+pub.during+pub.after, pub.before, pub.during, pub.after, pub.summary,
		strings.Join(in.mig.runs, "; "), in.mig.reportHeldFor.Round(10*time.Millisecond), in.mig.probeCount,
		in.mig.longestProbe.Round(time.Millisecond), strings.Join(gates, ", "))
}

// guardedSince is when migration 0006 was applied (its schema_migrations
// row's time, which is no later than its triggers took effect): from then
// on the triggers keep the fence for a writer that takes no attempt. Zero
// when it is not applied.
func (u *upgrade) guardedSince() time.Time {
	u.t.Helper()
	var at time.Time
	err := u.db.QueryRow(context.Background(), `SELECT applied_at FROM schema_migrations WHERE version = '0006_release_writers'`).Scan(&at)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		u.t.Fatal(err)
	}
	return at
}

// ownRace reports whether the order's double charge is one a release
// without a fence (1.0.0) makes by itself, whatever else runs: two of its
// paths send the first key, one is refused (a 404 stores nothing) and
// settles rejected, the next event reopens the invoice under finalKey and
// is charged, and the other request under the first key lands. Both moves
// that make it, the rejection and the reopen under finalKey, were made
// before guarded, while only that release ran on its own schema (this
// release's processes start after the migrations): nothing of this release
// could refuse them. The same moves after guarded are this release's
// failure.
func ownRace(trs []transition, orderID string, finalKey uuid.UUID, guarded time.Time) bool {
	if guarded.IsZero() {
		return false
	}
	var reopen *transition
	for i := range trs {
		if tr := &trs[i]; tr.orderID == orderID && tr.reopen() && tr.key == finalKey && tr.oldKey != finalKey {
			reopen = tr
		}
	}
	if reopen == nil || !reopen.at.Before(guarded) {
		return false
	}
	var rejected time.Time // the last rejection under the first key before the reopen
	for _, tr := range trs {
		if tr.orderID == orderID && tr.status == order.StatusRejected && tr.key == reopen.oldKey && !tr.at.After(reopen.at) {
			rejected = tr.at
		}
	}
	return !rejected.IsZero() && rejected.Before(guarded)
}

// wantStatus is where an order of kind k may end.
func wantStatus(k orderKind) []order.InvoiceStatus {
	switch k {
	case kindDeclined:
		return []order.InvoiceStatus{order.StatusDeclined}
	case kindHeld:
		return []order.InvoiceStatus{order.StatusHeld}
	case kindRejectFirst:
		// Charged once an event reopened it; rejected when every event of
		// the order had been handled before its first key was refused.
		return []order.InvoiceStatus{order.StatusCharged, order.StatusRejected}
	default:
		return []order.InvoiceStatus{order.StatusCharged}
	}
}

// story tells what happened to one order, in time: the gateway's answers
// and the invoice's transitions, for a failure's message.
func story(orderID string, calls []gatewaystub.Call, trs []transition) string {
	type line struct {
		at   time.Time
		text string
	}
	var lines []line
	for _, c := range calls {
		if c.OrderID == orderID {
			lines = append(lines, line{c.Time, fmt.Sprintf("gateway %s → %d", c.Key, c.Status)})
		}
	}
	for _, tr := range trs {
		if tr.orderID == orderID {
			lines = append(lines, line{tr.at, fmt.Sprintf("invoice %s/%s → %s/%s", tr.oldStatus, tr.oldKey, tr.status, tr.key)})
		}
	}
	slices.SortStableFunc(lines, func(a, b line) int { return a.at.Compare(b.at) })
	var b strings.Builder
	for _, l := range lines {
		b.WriteString("\n\t" + l.at.Format("15:04:05.000") + " " + l.text)
	}
	return b.String()
}

// lostEvents checks that every record the load sent ended billed, as a
// duplicate (both leave the event's dedup row) or in the DLQ, and returns
// how many did not.
func (u *upgrade) lostEvents(sent []sentRecord) int {
	t := u.t
	t.Helper()
	ctx := context.Background()
	rows, _ := u.db.Query(ctx, `SELECT event_id FROM processed_event WHERE consumer_group = $1`, u.e.group)
	seen := map[uuid.UUID]bool{}
	var id uuid.UUID
	if _, err := pgx.ForEachRow(rows, []any{&id}, func() error { seen[id] = true; return nil }); err != nil {
		t.Fatalf("read processed_event: %v", err)
	}
	dlq := map[uuid.UUID]bool{}
	for _, m := range kafkatest.ReadAll(t, u.e.brokers, u.e.dlq, 0, time.Minute) {
		evt, err := wire.Decode(m.Value, "EUR")
		if err != nil {
			t.Errorf("DLQ record %s/%d: not an event of the load: %v", m.Key, m.Offset, err)
			continue
		}
		dlq[evt.EventID] = true
	}
	lost := 0
	for _, s := range sent {
		if !seen[s.eventID] && !dlq[s.eventID] {
			lost++
			if lost <= 10 {
				t.Errorf("record %s of %s (%s) is lost: no dedup row, not in the DLQ", s.eventID, s.orderID, s.what)
			}
		}
	}
	if lost > 10 {
		t.Errorf("%d records lost", lost)
	}
	return lost
}

// publication is what checkPublished counted.
type publication struct {
	before, during, after int // transitions, by when they were made
	summary               string
}

// checkPublished compares the invoice topic with the transitions. A
// transition made after the migrations (and, where the previous release
// publishes its own, any transition) is published, with its §9 id and its
// row's fields; one made before them by a release that published nothing
// is history and is not published; one made while they ran may be either.
// No event names a transition that did not happen, and an order's events
// come in the order of its transitions. reopens counts every reopen made
// after the migrations, whoever made it.
func (u *upgrade) checkPublished(trs []transition, in checkInput) publication {
	t := u.t
	t.Helper()
	var pub publication
	events := map[uuid.UUID][]publishedEvent{}
	var sequence []publishedEvent // as read: by partition, then offset
	for _, m := range kafkatest.ReadAll(t, u.e.brokers, u.e.invoiceTopic, 0, time.Minute) {
		var ev publishedEvent
		if err := json.Unmarshal(m.Value, &ev); err != nil {
			t.Errorf("invoice event %s/%d: %v: %q", m.Key, m.Offset, err, m.Value)
			continue
		}
		ev.key = string(m.Key)
		if strings.HasPrefix(ev.OrderID, "probe-") {
			continue
		}
		id, err := uuid.FromString(ev.EventID)
		if err != nil {
			t.Errorf("invoice event of %s: event_id %q: %v", ev.OrderID, ev.EventID, err)
			continue
		}
		events[id] = append(events[id], ev)
		sequence = append(sequence, ev)
	}

	type when int
	const (
		before when = iota
		during
		after
	)
	phase := func(tr transition) when {
		switch {
		case tr.at.Before(in.mig.start):
			return before
		case tr.at.After(in.mig.end):
			return after
		}
		return during
	}
	known := map[uuid.UUID]transition{}
	required := map[uuid.UUID]bool{}
	for _, tr := range trs {
		if !tr.final() {
			continue
		}
		id := tr.eventID()
		known[id] = tr
		switch phase(tr) {
		case before:
			pub.before++
		case during:
			pub.during++
		case after:
			pub.after++
		}
		if phase(tr) == after || in.prev.outbox {
			required[id] = true
		}
	}
	missing, history, wrong, copies, unknown := 0, 0, 0, 0, 0
	for _, tr := range trs {
		if !tr.final() {
			continue
		}
		id := tr.eventID()
		evs := events[id]
		switch {
		case required[id] && len(evs) == 0:
			missing++
			if missing <= 10 {
				t.Errorf("transition of %s to %s under %s (reopens %v) at %v, after the migrations: never published (want event %s)",
					tr.orderID, tr.status, tr.key, deref(tr.reopens), tr.at.Format(time.RFC3339Nano), id)
			}
		case !required[id] && phase(tr) == before && len(evs) > 0:
			history++
			if history <= 10 {
				t.Errorf("transition of %s to %s under %s, made before the migrations by v%s, was published: history is not published again",
					tr.orderID, tr.status, tr.key, u.from.Version)
			}
		}
		if len(evs) > 1 {
			copies += len(evs) - 1
		}
		for _, ev := range evs {
			if ev.EventType != string(order.EventTypeOf(tr.status)) || ev.OrderID != tr.orderID || ev.key != tr.orderID ||
				ev.IdempotencyKey != tr.key.String() || ev.Amount != tr.amount || ev.Currency != tr.currency ||
				(tr.status == order.StatusCharged && ev.ChargeID != tr.chargeID) {
				wrong++
				if wrong <= 10 {
					t.Errorf("event %s of %s: %+v, want the transition to %s under %s, amount %d %s, charge %q",
						id, tr.orderID, ev, tr.status, tr.key, tr.amount, tr.currency, tr.chargeID)
				}
			}
		}
	}
	for id, evs := range events {
		if _, ok := known[id]; !ok {
			unknown++
			if unknown <= 10 {
				t.Errorf("event %s (%s of %s under %s) names no transition the invoice made", id, evs[0].EventType, evs[0].OrderID, evs[0].IdempotencyKey)
			}
		}
	}

	// An order's events in the order of its transitions.
	seqs := map[string][]int64{} // order → audit ids of its published transitions, as read
	seenID := map[uuid.UUID]bool{}
	for _, ev := range sequence {
		id := uuid.FromStringOrNil(ev.EventID)
		if tr, ok := known[id]; ok && !seenID[id] {
			seenID[id] = true
			seqs[tr.orderID] = append(seqs[tr.orderID], tr.id)
		}
	}
	disordered := 0
	for o, ids := range seqs {
		if !slices.IsSorted(ids) {
			disordered++
			if disordered <= 10 {
				t.Errorf("events of %s published out of the order of its transitions (audit ids %v)", o, ids)
			}
		}
	}

	// reopens, whoever writes: +1 at each reopen, unchanged otherwise,
	// along each order's transitions made after the migrations.
	prev := map[string]transition{}
	badReopens := 0
	for _, tr := range trs {
		p, ok := prev[tr.orderID]
		prev[tr.orderID] = tr
		if !ok || phase(p) != after || phase(tr) != after || p.reopens == nil || tr.reopens == nil {
			continue
		}
		want := *p.reopens
		if tr.reopen() {
			want++
		}
		if *tr.reopens != want {
			badReopens++
			if badReopens <= 10 {
				t.Errorf("%s: %s → %s under %s: reopens %d, want %d", tr.orderID, tr.oldStatus, tr.status, tr.key, *tr.reopens, want)
			}
		}
	}

	for _, c := range []struct {
		n    int
		what string
	}{{missing, "transitions never published"}, {history, "history transitions published"}, {wrong, "events unlike their transition"},
		{unknown, "events of no transition"}, {disordered, "orders with events out of order"}, {badReopens, "transitions with a wrong reopens"}} {
		if c.n > 10 {
			t.Errorf("%d %s", c.n, c.what)
		}
	}
	pub.summary = fmt.Sprintf("%d invoice event records, %d distinct ids, %d copies; %d required transitions never published",
		len(sequence), len(events), copies, missing)
	return pub
}

func deref(p *int) any {
	if p == nil {
		return "none"
	}
	return *p
}
