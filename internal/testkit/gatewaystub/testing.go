package gatewaystub

import "testing"

// StartTest is Start for a test: it fails t if the stub cannot listen,
// closes the stub when t ends, and returns the stub's base URL. Set faults
// or latency before or after; they apply from the next request.
func (s *Stub) StartTest(t testing.TB) string {
	t.Helper()
	url, err := s.Start()
	if err != nil {
		t.Fatalf("start gateway stub: %v", err)
	}
	t.Cleanup(s.Close)
	return url
}
