package config

import "testing"

func TestMaskURL(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, want string }{
		{"https://svc:GwPassw0rd@gateway.example/v1", "https://***@gateway.example/v1"},
		{"https://token@gateway.example", "https://***@gateway.example"},
		{"http://127.0.0.1:8080", "http://127.0.0.1:8080"},
		{"https://svc:GwPassw0rd/gateway", "***"}, // the @ is missing: the password reads as a port
	} {
		if got := MaskURL(tt.in); got != tt.want {
			t.Errorf("MaskURL(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
