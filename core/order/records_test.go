package order_test

import (
	"strings"
	"testing"

	"github.com/acme/billing/core/order"
)

func TestValidOrderID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		id   string
		want bool
	}{
		{"ord-123", true},
		{"commande-été", true},
		{strings.Repeat("o", 128), true},
		{strings.Repeat("o", 129), false},
		{"", false},
		{"  ", false},
		{"ord\x00", false},
		{"ord\u0085", false},
		{"ord\xff", false},
	}
	for _, tt := range tests {
		if got := order.ValidOrderID(tt.id); got != tt.want {
			t.Errorf("ValidOrderID(%q) = %v, want %v", tt.id, got, tt.want)
		}
	}
}
