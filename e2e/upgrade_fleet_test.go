package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/acme/billing/internal/testkit/poll"
)

// fleet is the billing processes of one upgrade run, started and stopped
// as a Deployment's rollout starts and stops pods.
type fleet struct {
	u       *upgrade
	members []*member
}

// member is one process of the fleet, watched through its /metrics.
type member struct {
	name    string
	release string
	p       *proc
	base    string // http://host:port
	started time.Time

	stopWatch chan struct{}
	watchDone chan struct{}

	mu        sync.Mutex
	gauge     bool          // it exports billing_consumption_paused{by="release"}
	paused    time.Duration // how long that gauge read 1
	pausedNow bool
	outage    time.Duration // how long billing_consumer_paused (an outage) read 1
	outageNow bool
	lastSeen  time.Time
	handled   float64 // billing_events_total, every final outcome (not "retried")
}

// pausedByRelease is the gauge of a process that waits for a release it
// is not safe beside (docs/interface.md §8, §10).
const pausedByRelease = `billing_consumption_paused{by="release"}`

// watchEvery is how often a member's /metrics is read.
const watchEvery = 250 * time.Millisecond

func (f *fleet) start(name, release, bin string) *member {
	f.u.t.Helper()
	m := &member{name: name, release: release, started: time.Now(), stopWatch: make(chan struct{}), watchDone: make(chan struct{})}
	var extra []string
	if release == f.u.from.Version {
		extra = f.u.oldEnv
	}
	m.p = f.u.e.startBin(bin, extra, "run")
	m.base = "http://" + httpAddr(f.u.t, m.p)
	go m.watch()
	f.members = append(f.members, m)
	f.u.step("started %s (v%s)", name, release)
	return m
}

func (m *member) watch() {
	defer close(m.watchDone)
	tick := time.NewTicker(watchEvery)
	defer tick.Stop()
	for {
		select {
		case <-m.stopWatch:
			return
		case <-tick.C:
		}
		s := scrape(m.base + "/metrics")
		if len(s) == 0 {
			continue
		}
		var handled float64
		for series, v := range s {
			if strings.HasPrefix(series, "billing_events_total{") && !strings.Contains(series, `outcome="retried"`) {
				handled += v
			}
		}
		now := time.Now()
		m.mu.Lock()
		v, ok := s[pausedByRelease]
		m.gauge = m.gauge || ok
		if m.pausedNow {
			m.paused += now.Sub(m.lastSeen)
		}
		if m.outageNow {
			m.outage += now.Sub(m.lastSeen)
		}
		m.pausedNow, m.outageNow, m.lastSeen = ok && v == 1, s["billing_consumer_paused"] == 1, now
		m.handled = handled
		m.mu.Unlock()
	}
}

// events is how many events the member brought to a final outcome, as its
// last scrape said.
func (m *member) events() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.handled
}

// gate says how long the member waited for a release it is not safe
// beside (or that it exports no such gauge), and for an outage.
func (m *member) gate() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	release := "no " + pausedByRelease
	if m.gauge {
		release = fmt.Sprintf("paused by release %v", m.paused.Round(100*time.Millisecond))
	}
	return fmt.Sprintf("%s, for an outage %v", release, m.outage.Round(100*time.Millisecond))
}

// waitReady waits until the member answers /readyz with 200, as a
// rollout waits for a pod before it replaces the next one.
func (f *fleet) waitReady(m *member) {
	f.u.t.Helper()
	poll.Until(f.u.t, m.name+" ready", 90*time.Second, func() bool { return status(m.base+"/readyz") == http.StatusOK })
	f.u.step("%s ready after %v", m.name, time.Since(m.started).Round(100*time.Millisecond))
}

// waitWorking waits until the members together brought n more events to
// a final outcome: the fleet bills, whoever waited for whom.
func (f *fleet) waitWorking(ms []*member, n int) {
	f.u.t.Helper()
	sum := func() float64 {
		var s float64
		for _, m := range ms {
			s += m.events()
		}
		return s
	}
	from := sum()
	poll.UntilProgress(f.u.t, fmt.Sprintf("%d events handled by the new fleet", n), stall, f.u.finalCount,
		func() bool { return sum() >= from+float64(n) })
}

// stop sends the member SIGTERM and requires exit 0 (env.stop).
func (f *fleet) stop(m *member) {
	f.u.t.Helper()
	close(m.stopWatch)
	<-m.watchDone
	began := time.Now()
	f.u.e.stop(m.p)
	f.u.step("stopped %s: exit 0 after %v; %.0f events; %s", m.name, time.Since(began).Round(100*time.Millisecond), m.events(), m.gate())
}
