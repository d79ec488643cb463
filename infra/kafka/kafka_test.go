package kafkaclient

import (
	"errors"
	"strings"
	"testing"
)

// The SCRAM library quotes a password SASLprep refuses; NewCluster must not
// pass that text on (docs/interface.md §2).
func TestNewClusterWithholdsSASLprepError(t *testing.T) {
	t.Parallel()
	const secret = "Sup3rS3cret-planted"
	for _, mech := range []string{"scram-sha-256", "scram-sha-512"} {
		_, err := NewCluster(Settings{Brokers: []string{"127.0.0.1:9"}, SASLMechanism: mech,
			SASLUsername: "billing", SASLPassword: secret + "\u0007"})
		if !errors.Is(err, ErrSASLCredentials) {
			t.Fatalf("%s: err = %v, want ErrSASLCredentials", mech, err)
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("%s: error %q quotes the password", mech, err)
		}
	}
}
