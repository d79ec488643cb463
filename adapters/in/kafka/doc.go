// Package kafka is billing's inbound Kafka adapter: it turns records of the
// main topic and the retry tiers into calls of the billing service, routes
// failed records to the next retry tier or the dead-letter topic, and commits
// offsets only below events whose outcome is final (R-KFK-CONS-2).
//
// One Consumer serves one topic (the main topic or one retry tier). It
// fetches with FetchMessage, runs up to MaxInFlight events at once but never
// two of the same key, and commits per partition the highest offset below
// which every event is final, coalesced in time.
package kafka
