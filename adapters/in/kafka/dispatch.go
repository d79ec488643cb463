package kafka

import (
	"context"
	"strconv"
	"sync"
)

// dispatcher runs up to max events at once, at most one per key, in fetch
// order per key. A slot is taken when an event is accepted and released when
// it is final, so events waiting behind a busy key count against the limit:
// back-pressure stops fetching instead of queueing without bound.
//
// A key that becomes busy is handed to a long-lived worker rather than to a
// new goroutine: under load a goroutine per event spent 4% of the service's
// CPU growing fresh stacks (runtime.copystack in a 0 ms `make bench`
// profile). Workers are started as busy keys need them, so there are never
// more than max of them, and they end at close.
//
// T is what is dispatched (the consumer's delivery: a record and the
// partition state it belongs to); key gives its ordering key.
type dispatcher[T any] struct {
	slots chan struct{}
	jobs  chan job[T] // keys that became busy, for an idle worker
	key   func(T) string
	run   func(T)

	mu      sync.Mutex
	queues  map[string][]T // key busy → events waiting behind it
	workers int            // started; at least len(queues)
	wg      sync.WaitGroup // busy keys
	running sync.WaitGroup // workers
}

type job[T any] struct {
	key string
	msg T
}

func newDispatcher[T any](maxInFlight int, key func(T) string, run func(T)) *dispatcher[T] {
	return &dispatcher[T]{
		slots:  make(chan struct{}, maxInFlight),
		jobs:   make(chan job[T], maxInFlight),
		key:    key,
		run:    run,
		queues: map[string][]T{},
	}
}

// orderingKey is the key whose events must not overtake each other. Records
// without a key are ordered within their partition.
func orderingKey(m Record) string {
	if len(m.Key) == 0 {
		return "\x00partition:" + m.Topic + ":" + strconv.Itoa(m.Partition)
	}
	return string(m.Key)
}

// acquire waits for a free slot; false when ctx ended first.
func (d *dispatcher[T]) acquire(ctx context.Context) bool {
	select {
	case d.slots <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// dispatch hands msg, for which a slot was acquired, to an idle worker when
// its key is idle, else to the queue of the worker busy with its key.
//
// Every busy key has a worker: workers never fall below len(queues), and a
// worker takes one key at a time. The send never blocks: a job in the
// channel holds its event's slot, so there are at most cap(slots) of them.
func (d *dispatcher[T]) dispatch(msg T) {
	key := d.key(msg)
	d.mu.Lock()
	if q, busy := d.queues[key]; busy {
		d.queues[key] = append(q, msg)
		d.mu.Unlock()
		return
	}
	d.queues[key] = nil
	if len(d.queues) > d.workers {
		d.workers++
		d.running.Add(1)
		go d.worker()
	}
	d.wg.Add(1)
	d.mu.Unlock()
	d.jobs <- job[T]{key, msg}
}

func (d *dispatcher[T]) worker() {
	defer d.running.Done()
	for j := range d.jobs {
		d.work(j.key, j.msg)
	}
}

// work runs msg and then the events queued behind its key, until the key is
// idle. A key is idle before its last slot is released, so busy keys, and
// with them workers, never outnumber the slots.
func (d *dispatcher[T]) work(key string, msg T) {
	defer d.wg.Done()
	for {
		d.run(msg)
		d.mu.Lock()
		q := d.queues[key]
		if len(q) == 0 {
			delete(d.queues, key)
			d.mu.Unlock()
			<-d.slots
			return
		}
		msg = q[0]
		d.queues[key] = q[1:]
		d.mu.Unlock()
		<-d.slots
	}
}

// wait blocks until every dispatched event has been run.
func (d *dispatcher[T]) wait() { d.wg.Wait() }

// close ends the workers once every dispatched event has been run; nothing
// may be dispatched after it.
func (d *dispatcher[T]) close() {
	d.wg.Wait()
	close(d.jobs)
	d.running.Wait()
}

// started is how many workers were started.
func (d *dispatcher[T]) started() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.workers
}

// idle returns a channel closed once every dispatched event has been run.
func (d *dispatcher[T]) idle() <-chan struct{} {
	ch := make(chan struct{})
	go func() { d.wg.Wait(); close(ch) }()
	return ch
}
