package app

import (
	"net/http"
	"net/http/pprof"
)

// handlePprof serves net/http/pprof's endpoints under /debug/pprof/ on mux:
// the diagnostic BILLING_PPROF turns on (README.md, Configuration), which
// `make bench` uses to profile the service in a run of its own. Registered
// on the service's mux, never on http.DefaultServeMux, which importing
// net/http/pprof fills for a server this process does not run.
//
// A CPU profile's ?seconds must stay below the server's WriteTimeout, or
// net/http/pprof refuses it.
func handlePprof(mux *http.ServeMux) {
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
}
