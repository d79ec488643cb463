package config

import (
	"encoding/json"
	"log/slog"
	"net/url"
	"strings"
)

// logged is Config without its methods, so that LogValue and MarshalJSON
// can hand a masked copy to the encoder without calling themselves.
type logged Config

// Masked returns c with every secret masked: the Secret fields print as
// "***" by themselves, and the user info of BILLING_PAYMENT_BASE_URL (a
// plain URL, since only its user info is secret) is masked here.
func (c Config) Masked() Config {
	c.PaymentBaseURL = MaskURL(c.PaymentBaseURL)
	return c
}

// LogValue makes slog.Any("config", cfg) log the masked configuration.
func (c Config) LogValue() slog.Value { return slog.AnyValue(logged(c.Masked())) }

// MarshalJSON encodes the masked configuration.
func (c Config) MarshalJSON() ([]byte, error) { return json.Marshal(logged(c.Masked())) }

// MaskURL returns raw with its user info (user and password) replaced by
// "***". A value that does not parse is withheld whole: the parser's view
// of where the user info ends cannot be trusted then.
func MaskURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "***"
	}
	if u.User == nil {
		return raw
	}
	u.User = nil
	return strings.Replace(u.String(), "//", "//***@", 1)
}
