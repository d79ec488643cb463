package postgres

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// The grouper's own work, without Postgres: a run that answers at once,
// so that what is measured is the queue, the hand-offs between the
// callers' goroutines and the runners', and the taking of groups.

// BenchmarkGrouperDo is one request through the grouper from concurrent
// callers (b.RunParallel, 64 per CPU: an in-flight window's worth), each
// with a key of its own, as the reserves of distinct orders are.
func BenchmarkGrouperDo(b *testing.B) {
	g := &grouper[int, int]{limit: 1, max: 256,
		key:     func(ks []string, r int) []string { return append(ks, strconv.Itoa(r)) },
		acquire: func(context.Context) (*pgxpool.Conn, error) { return nil, nil },
		run: func(_ context.Context, _ batchSender, reqs []int) ([]int, error) {
			return reqs, nil
		},
	}
	var next atomic.Int64
	b.SetParallelism(32)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			r := int(next.Add(1))
			got, alone, err := g.do(ctx, r)
			if err != nil || alone || got != r {
				b.Errorf("do(%d) = %d, %v, %v", r, got, alone, err)
				return
			}
		}
	})
}

// BenchmarkGrouperTake is the taking of one group of 64 requests with
// distinct keys from a queue of 64, per request.
func BenchmarkGrouperTake(b *testing.B) {
	const n = 64
	g := &grouper[int, int]{limit: 1, max: 256, key: func(ks []string, r int) []string { return append(ks, strconv.Itoa(r)) }}
	ws := make([]*waiter[int, int], n)
	for i := range ws {
		ws[i] = &waiter[int, int]{ctx: context.Background(), req: i}
	}
	b.ReportAllocs()
	for b.Loop() {
		g.queue = append(g.queue[:0], ws...)
		if got := g.take(); len(got) != n {
			b.Fatalf("took %d, want %d", len(got), n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/request")
}
