package e2e

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/acme/billing/internal/testkit/gatewaystub"
	"github.com/acme/billing/internal/testkit/poll"
)

// TestBrokerRestartMidStream: the real broker stops for
// 10 s mid-stream, while records are being routed to the retry tiers (the
// gateway answers 503 to one order in five, twice), and starts again on
// the same port with the same data. A broker restart is a short outage:
// billing keeps running (not ready meanwhile), then every order is billed
// once, nothing valid is dead-lettered, the offsets reach the end and
// /readyz answers 200 again.
func TestBrokerRestartMidStream(t *testing.T) {
	t.Parallel()
	e := newEnvOwnBroker(t)
	e.runOK("migrate")
	w := newWorkload(t, 3000, 300, 50, 20)
	// Every call takes 20 ms, so that the stream is still running when the
	// broker stops; the orders whose id ends in 0 or 5 are refused with 503
	// on their first two calls: tier 1, then tier 2, charged there.
	e.gw.SetFault(func(c gatewaystub.Call, n int) gatewaystub.Fault {
		f := gatewaystub.Fault{Delay: 20 * time.Millisecond}
		if n <= 2 && (strings.HasSuffix(c.OrderID, "0") || strings.HasSuffix(c.OrderID, "5")) {
			f.Status = http.StatusServiceUnavailable
		}
		return f
	})
	e.produce(w.records)

	p := e.start("run")
	base := "http://" + httpAddr(t, p)
	retried := func() float64 { return scrape(base + "/metrics")[`billing_events_total{outcome="retried"}`] }
	poll.Until(t, "records routed to the tiers mid-stream", 2*time.Minute, func() bool {
		return retried() >= 20 && e.invoiceCount() >= 500
	})
	atStop, retriedAtStop := e.invoiceCount(), retried()
	e.broker.StopBroker(t)
	stopped := time.Now()
	t.Logf("broker stopped with %d of %d orders invoiced, %.0f records routed to a tier", atStop, len(w.orders), retriedAtStop)

	// Ten seconds without a broker: the process runs on, alive, and says it
	// is not ready.
	notReady := false
	poll.Until(t, "10 s of broker outage", 20*time.Second, func() bool {
		select {
		case err := <-p.done:
			t.Fatalf("billing exited while the broker was down: %v", err)
		default:
		}
		if code := status(base + "/healthz"); code != http.StatusOK {
			t.Fatalf("/healthz = %d while the broker was down, want 200", code)
		}
		if status(base+"/readyz") == http.StatusServiceUnavailable {
			notReady = true
		}
		return time.Since(stopped) >= 10*time.Second
	})
	if !notReady {
		t.Error("/readyz never answered 503 while the broker was down")
	}
	duringOutage := e.invoiceCount()

	e.broker.RestartBroker(t)
	restarted := time.Now()
	var readyAfter time.Duration
	poll.Until(t, "/readyz 200 after the restart", 3*time.Minute, func() bool {
		if status(base+"/readyz") != http.StatusOK {
			return false
		}
		readyAfter = time.Since(restarted)
		return true
	})
	poll.Until(t, "the main topic's and the tiers' groups to commit every partition to its end, no invoice pending",
		3*time.Minute, func() bool { return e.caughtUp() && e.tiersCaughtUp(2) && e.pendingCount() == 0 })
	caughtUpAfter := time.Since(restarted)
	m := scrape(base + "/metrics")
	if code := status(base + "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz = %d at the end, want 200", code)
	}
	t.Logf("broker down %v; %d invoices when it stopped, %d when it came back; /readyz 200 %v after the restart, "+
		"offsets of the main topic and the tiers at the end, nothing pending, %v after it; outcomes: %.0f charged, %.0f retried (%.0f before the stop), %.0f dead-lettered, %.0f duplicates",
		restarted.Sub(stopped).Round(100*time.Millisecond), atStop, duringOutage, readyAfter.Round(100*time.Millisecond),
		caughtUpAfter.Round(100*time.Millisecond), m[`billing_events_total{outcome="charged"}`], m[`billing_events_total{outcome="retried"}`],
		retriedAtStop, m[`billing_events_total{outcome="dead_lettered"}`],
		m[`billing_events_total{outcome="duplicate"}`]+m[`billing_events_total{outcome="duplicate_order"}`])
	e.stop(p)
	e.check(w)
}

// tiersCaughtUp reports whether the groups of retry tiers 1..n committed
// every partition of their tier to its end.
func (e *env) tiersCaughtUp(n int) bool {
	for tier := 1; tier <= n; tier++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		lag, err := e.kc.Lag(ctx, e.retryGroup(tier), e.retryTopic(tier))
		cancel()
		if err != nil || len(lag) == 0 {
			return false
		}
		for _, l := range lag {
			if l != 0 {
				return false
			}
		}
	}
	return true
}

// status is the status code of GET url, 0 when there is no answer.
func status(url string) int {
	resp, err := http.Get(url)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}
