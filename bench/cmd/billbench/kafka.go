package main

import (
	"time"

	kafkago "github.com/segmentio/kafka-go"
)

// transport is a kafka-go transport to the bench's brokers (plaintext, no
// SASL), under the bench's client id, for the writers that produce its
// load. The bench module may use kafka-go directly; the service reaches
// Kafka only through infra/kafka and adapters/in/kafka.
func (e *env) transport() *kafkago.Transport {
	return &kafkago.Transport{ClientID: "billbench", DialTimeout: 10 * time.Second, IdleTimeout: 30 * time.Second,
		MetadataTTL: 15 * time.Second}
}

// client is an admin client over its own transport, and a function that
// releases the transport's connections.
func (e *env) client() (*kafkago.Client, func()) {
	t := e.transport()
	return &kafkago.Client{Addr: kafkago.TCP(e.brokers...), Transport: t, Timeout: 10 * time.Second}, t.CloseIdleConnections
}
