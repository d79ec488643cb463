package httpgateway

import (
	"strings"
	"testing"
)

func TestToken(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]string{
		"card_declined": "card_declined", "idempotency_error": "idempotency_error", "v1.2-x": "v1.2-x",
		strings.Repeat("a", 64): strings.Repeat("a", 64), strings.Repeat("a", 65): "", "": "",
		"two words": "", "quote'": "", "new\nline": "", "é": "", "<script>": "",
	} {
		if got := Token(s); got != want {
			t.Errorf("Token(%q) = %q, want %q", s, got, want)
		}
	}
}
