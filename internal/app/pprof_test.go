package app

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/acme/billing/internal/testkit/pgtest"
)

// /debug/pprof/ is served only when BILLING_PPROF asks for it: off, the
// paths are unknown like any other.
func TestPprofOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	_, dsn := pgtest.NewDB(t)
	for _, on := range []bool{false, true} {
		cfg := testConfig([]string{"127.0.0.1:9"}, dsn, "http://127.0.0.1:9")
		cfg.Pprof = on
		a, err := New(context.Background(), cfg, Tuning{}, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		h := a.Handler()
		for _, path := range []string{"/debug/pprof/", "/debug/pprof/allocs?debug=1", "/debug/pprof/cmdline"} {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
			if want := map[bool]int{false: http.StatusNotFound, true: http.StatusOK}[on]; rec.Code != want {
				t.Errorf("BILLING_PPROF=%v: GET %s: %d, want %d", on, path, rec.Code, want)
			}
		}
		a.Close()
	}
}
