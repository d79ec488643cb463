// Package kafka is billing's inbound Kafka adapter: it turns records of the
// main topic and the retry tiers into calls of the billing service, routes
// failed records to the next retry tier or the dead-letter topic, and commits
// offsets only below events whose outcome is final (docs/design.md, "The
// consumer").
//
// One Consumer serves one topic (the main topic or one retry tier). It takes
// the consumer group's generations one at a time (kafka-go's ConsumerGroup),
// reads each partition the generation assigned from its committed offset,
// runs up to MaxInFlight events at once but never two of the same key, and
// commits per partition, through that generation only, the highest offset
// below which every event is final, coalesced in time. A partition taken
// away by a rebalance gets a short grace to commit what finished; nothing
// that finishes later is committed for it.
//
// The package works on its own Record, Header and Generation. kafka-go, the
// client, is imported by two files only: source.go (the group, the
// partition readers, and their messages and generations as the package's
// types) and writer.go (routed records as kafka-go messages, the broker's
// refusals as ErrRefused). Both share a record's bytes rather than copy them.
package kafka
