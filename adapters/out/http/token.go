package httpgateway

// MaxTokenBytes is the longest error code of a provider that billing
// repeats (docs/interface.md §6).
const MaxTokenBytes = 64

// Token returns s when it is a short token, [A-Za-z0-9_.-]{1,64}: the most
// of a provider's own words that may leave an adapter (an error code such
// as card_declined or idempotency_error); "" for anything else, which is
// free text and stays inside the adapter (docs/interface.md §6).
func Token(s string) string {
	if s == "" || len(s) > MaxTokenBytes {
		return ""
	}
	for i := range len(s) {
		if !tokenByte(s[i]) {
			return ""
		}
	}
	return s
}

func tokenByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-'
}
