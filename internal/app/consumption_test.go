package app

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	kafkago "github.com/segmentio/kafka-go"

	"github.com/acme/billing/core/order"
	"github.com/acme/billing/internal/testkit/kafkatest"
	"github.com/acme/billing/internal/testkit/pgtest"
	"github.com/acme/billing/internal/testkit/poll"
	"github.com/acme/billing/internal/testkit/syncbuf"
)

// newProcesses starts n billing processes (in-process Apps) on one
// database, one broker and one gateway stub, as n pods of one Deployment,
// each keeping its log in its harness's logw, and waits until they have
// billed a few orders.
func newProcesses(t *testing.T, n int) []*harness {
	t.Helper()
	pool, dsn := pgtest.NewDB(t)
	procs := []*harness{newHarnessLogged(t, nil, pool, dsn, nil, &syncbuf.Buffer{})}
	for len(procs) < n {
		procs = append(procs, procs[0].member(&syncbuf.Buffer{}))
	}
	// They bill before anything stops them.
	procs[0].chargedOnce(procs[0].sendOrders("before", 6))
	return procs
}

// restart stops h's process and starts a new one in its place, with a
// fresh log.
func (h *harness) restart() {
	h.t.Helper()
	h.shutdown()
	h.logw = &syncbuf.Buffer{}
	h.start()
}

// log returns what h's current process logged.
func (h *harness) log() string { return h.logw.(*syncbuf.Buffer).String() }

// paused reads billing_consumption_paused{by}.
func (h *harness) pausedBy(by string) float64 {
	return testutil.ToFloat64(h.app.Metrics.ConsumptionPaused.WithLabelValues(by))
}

// members describes the main topic's consumer group.
func (h *harness) members() (state string, members []kafkago.DescribeGroupsResponseMember) {
	h.t.Helper()
	tr := &kafkago.Transport{DialTimeout: 5 * time.Second}
	defer tr.CloseIdleConnections()
	client := &kafkago.Client{Addr: kafkago.TCP(h.brokers...), Transport: tr, Timeout: 10 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := client.DescribeGroups(ctx, &kafkago.DescribeGroupsRequest{GroupIDs: []string{h.cfg.KafkaGroupID}})
	if err != nil || len(resp.Groups) != 1 {
		h.t.Logf("describe %s: %v", h.cfg.KafkaGroupID, err)
		return "", nil
	}
	return resp.Groups[0].GroupState, resp.Groups[0].Members
}

// sendOrders sends one event for each of n new orders named prefix-i and
// returns the order ids.
func (h *harness) sendOrders(prefix string, n int) []string {
	h.t.Helper()
	var ids []string
	var msgs []kafkago.Message
	for i := range n {
		id := fmt.Sprintf("%s-%d", prefix, i)
		_, m := event(h.t, id, "cus-1", 1000+int64(i))
		ids, msgs = append(ids, id), append(msgs, m)
	}
	h.send(msgs...)
	return ids
}

// invoiced counts the orders of ids that have an invoice.
func (h *harness) invoiced(ids []string) int {
	invs, err := h.store.Invoices(context.Background())
	if err != nil {
		return -1
	}
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	n := 0
	for _, inv := range invs {
		if want[inv.OrderID] {
			n++
		}
	}
	return n
}

// chargedOnce waits until every order of ids is charged, and checks the
// gateway charged each exactly once.
func (h *harness) chargedOnce(ids []string) {
	h.t.Helper()
	for _, id := range ids {
		h.waitInvoice(id, order.StatusCharged)
		if got := h.gw.ChargesForOrder(id); len(got) != 1 {
			h.t.Errorf("order %s charged %d times, want once", id, len(got))
		}
	}
}

// TestOperatorPause: `billing consume pause` stops every process within
// 10 s (docs/interface.md §1): each finishes, commits and leaves the group,
// which is then empty, stays ready, and says who paused and when; a
// process started while paused never joins; `resume` brings them all back
// and what arrived meanwhile is billed, each order once.
func TestOperatorPause(t *testing.T) {
	t.Parallel()
	procs := newProcesses(t, 2)
	h := procs[0]

	_, paused, err := h.store.SetConsumption(context.Background(), true, "alice", "standby promoted")
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, "every process to leave the group within 10 s of the pause", 10*time.Second, func() bool {
		state, members := h.members()
		return procs[0].pausedBy("operator") == 1 && procs[1].pausedBy("operator") == 1 && state == "Empty" && len(members) == 0
	})
	for i, p := range procs {
		if ok, why := p.app.Ready(); !ok {
			t.Errorf("process %d not ready while paused by an operator: %s", i, why)
		}
		want := float64(paused.DecidedAt.UnixMilli()) / 1000
		if got := testutil.ToFloat64(p.app.Metrics.OperatorPause.WithLabelValues("alice")); got != want {
			t.Errorf("process %d: billing_operator_pause_timestamp_seconds{decided_by=alice} = %v, want %v", i, got, want)
		}
	}
	for i, p := range procs {
		// Each consumer logs why once it has left (the group is empty a
		// moment before).
		poll.Until(t, fmt.Sprintf("process %d to log why it holds consumption", i), 10*time.Second, func() bool {
			return strings.Count(p.log(), `"msg":"consumption held: not in the group, nothing fetched","tier":0,"why":"operator: paused by alice at `) == 1
		})
	}
	committed := kafkatest.CommittedOffsets(t, h.brokers, h.cfg.KafkaGroupID, testTopic)
	if end := kafkatest.EndOffsets(t, h.brokers, testTopic); fmt.Sprint(committed) != fmt.Sprint(end) {
		t.Errorf("committed %v when the group was left, want the end %v", committed, end)
	}

	// Orders arrive while paused, and a process restarts: it reads the
	// switch before it joins, so it never fetches.
	during := h.sendOrders("during", 6)
	procs[1].restart()
	poll.Until(t, "the restarted process to hold each of its consumers (the main topic and two tiers)", 20*time.Second, func() bool {
		return strings.Count(procs[1].log(), "consumption held: not in the group, nothing fetched") == 3
	})
	if state, members := h.members(); state != "Empty" || len(members) != 0 || procs[1].pausedBy("operator") != 1 ||
		strings.Contains(procs[1].log(), "partitions assigned") {
		t.Errorf("a process started while paused joined: group %s with %d members; its log:\n%s", state, len(members),
			grepLines(procs[1].log(), "partitions assigned"))
	}
	if n := h.invoiced(during); n != 0 {
		t.Fatalf("%d orders sent while paused were invoiced", n)
	}

	if _, _, err := h.store.SetConsumption(context.Background(), false, "bob", ""); err != nil {
		t.Fatal(err)
	}
	h.chargedOnce(during)
	for i, p := range procs {
		poll.Until(t, fmt.Sprintf("process %d to show the pause ended", i), 10*time.Second, func() bool {
			return p.pausedBy("operator") == 0 && testutil.CollectAndCount(p.app.Metrics.OperatorPause) == 0
		})
	}
}

// TestReleaseGate: a member of the group that announces nothing (a plain
// kafka-go reader, as billing before 1.2.0 joins) makes every process of
// this release leave within seconds, so that it keeps every partition,
// while the processes stay ready, bill nothing and say whom they wait
// for; after it leaves they wait an attempt's life more
// (BILLING_PAYMENT_TIMEOUT + 5 s), then consume again.
func TestReleaseGate(t *testing.T) {
	t.Parallel()
	procs := newProcesses(t, 2)
	h := procs[0]

	oldCfg := kafkatest.FastReaderConfig(h.brokers, h.cfg.KafkaGroupID, testTopic)
	// The assertion below counts an attempt's life from the moment this
	// member leaves: a short session could expire under load first, and
	// the processes would rightly count from then.
	oldCfg.SessionTimeout = time.Minute
	old := kafkago.NewReader(oldCfg)
	closed := false
	defer func() {
		if !closed {
			_ = old.Close()
		}
	}()
	var oldID string
	poll.Until(t, "the processes to leave the group to the member of the older release", 20*time.Second, func() bool {
		state, members := h.members()
		if state != "Stable" || len(members) != 1 || len(members[0].MemberMetadata.UserData) != 0 {
			return false
		}
		oldID = members[0].MemberID
		return procs[0].pausedBy("release") == 1 && procs[1].pausedBy("release") == 1
	})
	for i, p := range procs {
		if ok, why := p.app.Ready(); !ok {
			t.Errorf("process %d not ready while it waits for another release: %s", i, why)
		}
		// It says whom it waits for: the member announcing nothing, never
		// a process of its own release. (A kafka-go member that meets an
		// error rejoins under a new id, and is then logged again; that
		// each set is logged once is TestReleaseGateWaitsAndRejoins'.)
		lines := grepLines(p.log(), "members of a release this one is not safe beside are in the consumer groups")
		if lines == "" || !strings.Contains(lines, `"announced":"nothing (a release before 1.2.0)"`) ||
			strings.Contains(lines, `"announced":"release `) || !strings.Contains(lines, `"member_id":"`+oldID[:strings.LastIndex(oldID, "-")]) {
			t.Errorf("process %d does not say whom it waits for (%s):\n%s", i, oldID, lines)
		}
	}
	during := h.sendOrders("during", 6)

	leaving := time.Now()
	if err := old.Close(); err != nil {
		t.Fatal(err)
	}
	closed = true
	// The processes count an attempt's life from the first check that no
	// longer sees the member, which comes after its LeaveGroup: until then
	// they hold, whatever the scheduling.
	if procs[0].pausedBy("release") != 1 || procs[1].pausedBy("release") != 1 {
		t.Fatal("a process stopped waiting the moment the older release left, before its attempts could have ended")
	}
	if n := h.invoiced(during); n != 0 {
		t.Fatalf("%d orders billed while the older release held the group", n)
	}
	h.chargedOnce(during)
	// No process took an order before an attempt's life had passed since
	// the older release began to leave (one clock: Postgres runs here).
	life := order.NewAttemptTerms(h.cfg.PaymentTimeout, h.cfg.GatewayKeyTTL).Life
	invs, err := h.store.Invoices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, inv := range invs {
		if strings.HasPrefix(inv.OrderID, "during-") && inv.CreatedAt.Before(leaving.Add(life)) {
			t.Errorf("order %s invoiced %v after the older release began to leave, before an attempt's life (%v)",
				inv.OrderID, inv.CreatedAt.Sub(leaving), life)
		}
	}
	for i, p := range procs {
		poll.Until(t, fmt.Sprintf("process %d to consume again", i), 20*time.Second, func() bool {
			return p.pausedBy("release") == 0 && strings.Contains(p.log(), "the members this process waited for have left")
		})
	}
}
