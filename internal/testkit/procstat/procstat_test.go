package procstat

import (
	"os"
	"testing"
)

// This process's peak resident set is at least what it has allocated and
// touched.
func TestPeakRSS(t *testing.T) {
	b := make([]byte, 16<<20)
	for i := range b {
		b[i] = 1
	}
	got, err := PeakRSS(os.Getpid())
	if err != nil || got < int64(len(b)) {
		t.Errorf("PeakRSS = %d, %v; want at least %d", got, err, len(b))
	}
	if _, err := PeakRSS(-1); err == nil {
		t.Error("PeakRSS(-1) returned no error")
	}
}
