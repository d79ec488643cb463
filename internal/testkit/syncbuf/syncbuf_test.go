package syncbuf_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/acme/billing/internal/testkit/syncbuf"
)

// TestBufferConcurrent: writers in parallel with a reader lose no line
// (and -race sees no race).
func TestBufferConcurrent(t *testing.T) {
	t.Parallel()
	var b syncbuf.Buffer
	const writers, lines = 8, 100
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for range lines {
				if _, err := b.Write([]byte("line\n")); err != nil {
					t.Error(err)
					return
				}
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if got := strings.Count(b.String(), "line\n"); got != writers*lines {
		t.Errorf("lines = %d, want %d", got, writers*lines)
	}
}
