package kafka

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"pgregory.net/rapid"
)

// TestDispatcherKeyOrder runs random keys through the dispatcher with random
// completion orders and checks: never two events of one key at once, events
// of one key start in fetch order, never more than max at once, and every
// event runs exactly once.
func TestDispatcherKeyOrder(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(t *rapid.T) {
		maxInFlight := rapid.IntRange(1, 8).Draw(t, "max")
		nkeys := rapid.IntRange(1, 5).Draw(t, "keys")
		n := rapid.IntRange(1, 60).Draw(t, "events")

		type started struct {
			msg     kafkago.Message
			release chan struct{}
		}
		startedCh := make(chan started)
		var mu sync.Mutex
		running := map[string]bool{}
		active := 0
		var violation string
		lastStarted := map[string]int64{}

		d := newDispatcher(maxInFlight, func(m kafkago.Message) {
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
		fetched := 0
		var live []started
		ran := 0
		for ran < n {
			// Fetch while a slot is free (acquire would block otherwise).
			if fetched < n && len(d.slots) < cap(d.slots) {
				if !d.acquire(ctx) {
					t.Fatal("acquire failed")
				}
				key := rapid.IntRange(0, nkeys-1).Draw(t, "key")
				d.dispatch(kafkago.Message{Partition: 0, Offset: int64(fetched), Key: []byte(fmt.Sprint(key))})
				fetched++
			}
			// Collect newly started events without blocking.
			for {
				select {
				case s := <-startedCh:
					live = append(live, s)
					continue
				case <-time.After(time.Millisecond):
				}
				break
			}
			if len(live) == 0 {
				if fetched == n || len(d.slots) == cap(d.slots) {
					// Something must start: wait for it.
					select {
					case s := <-startedCh:
						live = append(live, s)
					case <-time.After(5 * time.Second):
						t.Fatalf("stalled: %d fetched, %d ran", fetched, ran)
					}
				}
				continue
			}
			i := rapid.IntRange(0, len(live)-1).Draw(t, "finish")
			close(live[i].release)
			live = append(live[:i], live[i+1:]...)
			ran++
		}
		d.wait()
		mu.Lock()
		defer mu.Unlock()
		if violation != "" {
			t.Fatal(violation)
		}
	})
}
