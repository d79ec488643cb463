package kafka

import (
	"context"
	"strconv"
	"sync"

	kafkago "github.com/segmentio/kafka-go"
)

// dispatcher runs up to max events at once, at most one per key, in fetch
// order per key. A slot is taken when an event is accepted and released when
// it is final, so events waiting behind a busy key count against the limit:
// back-pressure stops fetching instead of queueing without bound.
type dispatcher struct {
	slots chan struct{}
	run   func(kafkago.Message)

	mu     sync.Mutex
	queues map[string][]kafkago.Message // key busy → events waiting behind it
	wg     sync.WaitGroup
}

func newDispatcher(maxInFlight int, run func(kafkago.Message)) *dispatcher {
	return &dispatcher{
		slots:  make(chan struct{}, maxInFlight),
		run:    run,
		queues: map[string][]kafkago.Message{},
	}
}

// orderingKey is the key whose events must not overtake each other. Records
// without a key are ordered within their partition.
func orderingKey(m kafkago.Message) string {
	if len(m.Key) == 0 {
		return "\x00partition:" + m.Topic + ":" + strconv.Itoa(m.Partition)
	}
	return string(m.Key)
}

// acquire waits for a free slot; false when ctx ended first.
func (d *dispatcher) acquire(ctx context.Context) bool {
	select {
	case d.slots <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// dispatch hands msg, for which a slot was acquired, to a worker: a new one
// when its key is idle, else the queue of the worker busy with its key.
func (d *dispatcher) dispatch(msg kafkago.Message) {
	key := orderingKey(msg)
	d.mu.Lock()
	if q, busy := d.queues[key]; busy {
		d.queues[key] = append(q, msg)
		d.mu.Unlock()
		return
	}
	d.queues[key] = nil
	d.mu.Unlock()
	d.wg.Add(1)
	go d.work(key, msg)
}

func (d *dispatcher) work(key string, msg kafkago.Message) {
	defer d.wg.Done()
	for {
		d.run(msg)
		<-d.slots
		d.mu.Lock()
		q := d.queues[key]
		if len(q) == 0 {
			delete(d.queues, key)
			d.mu.Unlock()
			return
		}
		msg = q[0]
		d.queues[key] = q[1:]
		d.mu.Unlock()
	}
}

// wait blocks until every dispatched event has been run.
func (d *dispatcher) wait() { d.wg.Wait() }

// idle returns a channel closed once every dispatched event has been run.
func (d *dispatcher) idle() <-chan struct{} {
	ch := make(chan struct{})
	go func() { d.wg.Wait(); close(ch) }()
	return ch
}
