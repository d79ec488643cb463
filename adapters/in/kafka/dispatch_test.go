package kafka

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"

	"pgregory.net/rapid"
)

// TestDispatcherKeyOrder runs random keys through the dispatcher with random
// completion orders and checks: never two events of one key at once, events
// of one key start in fetch order, never more than max at once, and every
// event runs exactly once; and no more workers than max are started.
//
// Each iteration runs in a synctest bubble: after each step the test waits
// until every worker is blocked (synctest.Wait) and then finds exactly the
// starts the model predicts, none missing and none more, instead of waiting
// on the wall clock for them.
func TestDispatcherKeyOrder(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(rt *rapid.T) {
		// rapid reports a failed or abandoned iteration by panicking: the
		// panic is carried out of the bubble to rapid's recover, since
		// one left inside would end the test binary.
		var failure any
		synctest.Test(t, func(*testing.T) {
			defer func() { failure = recover() }()
			dispatcherKeyOrder(rt)
		})
		if failure != nil {
			panic(failure)
		}
	})
}

func dispatcherKeyOrder(t *rapid.T) {
	maxInFlight := rapid.IntRange(1, 8).Draw(t, "max")
	nkeys := rapid.IntRange(1, 5).Draw(t, "keys")
	n := rapid.IntRange(1, 60).Draw(t, "events")

	type started struct {
		msg     Record
		release chan struct{}
	}
	startedCh := make(chan started)
	var mu sync.Mutex
	running := map[string]bool{}
	active := 0
	var violation string
	lastStarted := map[string]int64{}

	d := newDispatcher(maxInFlight, orderingKey, func(m Record) {
		k := string(m.Key)
		mu.Lock()
		if running[k] && violation == "" {
			violation = fmt.Sprintf("key %s runs twice at once", k)
		}
		if last, ok := lastStarted[k]; ok && m.Offset < last && violation == "" {
			violation = fmt.Sprintf("key %s: offset %d started after %d", k, m.Offset, last)
		}
		lastStarted[k] = m.Offset
		running[k] = true
		active++
		if active > maxInFlight && violation == "" {
			violation = fmt.Sprintf("%d running, max %d", active, maxInFlight)
		}
		mu.Unlock()
		rel := make(chan struct{})
		startedCh <- started{m, rel}
		<-rel
		mu.Lock()
		running[k] = false
		active--
		mu.Unlock()
	})

	ctx := context.Background()
	// A model of the dispatcher says how many events must start after
	// each step, so the test waits for exactly those (no timing window)
	// and rapid sees the same draws on every run.
	queued := map[string]int{} // key → events dispatched and not finished
	expectStart := func(n int) []started {
		var got []started
		for len(got) < n {
			synctest.Wait() // every worker blocked: a start is waiting on startedCh, or none comes
			select {
			case s := <-startedCh:
				got = append(got, s)
			default:
				t.Fatalf("stalled: %d of %d starts", len(got), n)
			}
		}
		synctest.Wait()
		select {
		case s := <-startedCh:
			t.Fatalf("offset %d started, beyond the %d the model expects", s.msg.Offset, n)
		default:
		}
		return got
	}
	fetched, finished := 0, 0
	var live []started
	defer func() {
		// An iteration rapid abandons must not leave workers blocked.
		for _, s := range live {
			close(s.release)
		}
		idle := d.idle()
		for {
			select {
			case s := <-startedCh:
				close(s.release)
			case <-idle:
				d.close()
				return
			}
		}
	}()
	for finished < n {
		if fetched < n && fetched-finished < maxInFlight && rapid.Bool().Draw(t, "fetch") {
			if !d.acquire(ctx) {
				t.Fatal("acquire failed")
			}
			key := fmt.Sprint(rapid.IntRange(0, nkeys-1).Draw(t, "key"))
			d.dispatch(Record{Partition: 0, Offset: int64(fetched), Key: []byte(key)})
			fetched++
			queued[key]++
			if queued[key] == 1 {
				live = append(live, expectStart(1)...)
			}
			continue
		}
		if len(live) == 0 {
			continue
		}
		i := rapid.IntRange(0, len(live)-1).Draw(t, "finish")
		k := string(live[i].msg.Key)
		rel := live[i].release
		live = append(live[:i], live[i+1:]...)
		close(rel)
		finished++
		queued[k]--
		if queued[k] > 0 {
			live = append(live, expectStart(1)...)
		}
	}
	select {
	case s := <-startedCh:
		t.Fatalf("unexpected start of offset %d", s.msg.Offset)
	default:
	}
	d.wait()
	if w := d.started(); w > maxInFlight {
		t.Fatalf("%d workers started, max %d", w, maxInFlight)
	}
	mu.Lock()
	defer mu.Unlock()
	if violation != "" {
		t.Fatal(violation)
	}
}
