package kafkaclient

import (
	"context"
	"crypto/tls"
	"errors"
	"time"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
)

// Access is what a client built outside this package needs to reach the
// cluster as this package's own clients do: the brokers, the client id,
// the dial timeout, TLS and the SASL mechanism. adapters/in/kafka's door
// (source.go) builds its consumer group and partition readers from it. It
// holds no credential in clear: the mechanism carries them.
type Access struct {
	Brokers     []string
	ClientID    string
	DialTimeout time.Duration
	TLS         *tls.Config   // nil: plain TCP
	SASL        SASLMechanism // nil: no authentication
}

// SASLMechanism is a SASL authentication mechanism (RFC 4422): its name, as
// the broker's handshake knows it, and a session of challenges and
// responses per connection. Safe for concurrent use.
type SASLMechanism interface {
	Name() string
	// Start begins one connection's authentication: its session and the
	// initial response (nil when the mechanism sends none).
	Start(ctx context.Context) (SASLSession, []byte, error)
}

// SASLSession is one connection's exchange: Next takes the broker's
// challenge and returns the response, and done once authenticated.
type SASLSession interface {
	Next(ctx context.Context, challenge []byte) (done bool, response []byte, err error)
}

// Access returns how to reach the cluster.
func (c *Cluster) Access() Access {
	a := Access{Brokers: c.Brokers(), ClientID: c.clientID, DialTimeout: dialTimeout, TLS: c.tls}
	if c.sasl != nil {
		a.SASL = mechanism{c.sasl}
	}
	return a
}

// mechanism is kafka-go's SASL mechanism as a SASLMechanism: its state
// machine is a SASLSession as it is (the two interfaces have the same
// method).
type mechanism struct{ m sasl.Mechanism }

func (m mechanism) Name() string { return m.m.Name() }

func (m mechanism) Start(ctx context.Context) (SASLSession, []byte, error) { return m.m.Start(ctx) }

// SASLRefused reports whether err is a broker's refusal of the SASL login:
// wrong credentials or mechanism. Waiting does not fix them.
func SASLRefused(err error) bool {
	return errors.Is(err, kafkago.SASLAuthenticationFailed) || errors.Is(err, kafkago.IllegalSASLState) ||
		errors.Is(err, kafkago.UnsupportedSASLMechanism)
}
