package kafka

// Bounded input (docs/interface.md §5): how many headers a record may carry, and
// what becomes of a record the client did not decode.

// MaxRecordHeaders is the most headers of its own a record may carry: a
// record with more is dead-lettered as a stub (Record.HeadersDropped),
// never billed. The headers this service adds when it routes or replays a
// record (serviceHeaders) are not its own: a record of 4096 headers keeps
// them through every tier and the DLQ, and comes back from a replay.
const MaxRecordHeaders = 4096

// serviceHeaders are the headers this service adds to a record; each
// occurs once on a record it wrote.
var serviceHeaders = append(append([]string(nil), RoutingHeaders...), HeaderReplayedAt)

// DecodedRecordHeaders is the most headers the client decodes for one
// record: a record's own MaxRecordHeaders and the service's. Beyond it the
// client skips them undecoded (kafka-go's HeadersDroppedKey): decoded, a
// flood of empty headers costs a Header of 40 bytes for every 2 bytes on
// the wire. The readers of the consumer and of `dlq replay` decode this
// many; a test checks that it counts serviceHeaders.
const DecodedRecordHeaders = MaxRecordHeaders + 11

// ownHeaders is how many of hs are the record's own: all but the first of
// each header this service adds. On the main topic those were written by
// someone else and are replaced, never trusted (docs/interface.md §5); they are
// not counted either way, so that a record is billed or stubbed alike
// wherever it is read.
func ownHeaders(hs []Header) int {
	own := len(hs)
	seen := make([]bool, len(serviceHeaders))
	for _, h := range hs {
		if len(h.Key) < 2 || h.Key[0] != 'x' || h.Key[1] != '-' {
			continue
		}
		for i, k := range serviceHeaders {
			if h.Key == k && !seen[i] {
				seen[i] = true
				own--
				break
			}
		}
	}
	return own
}

// ValueOmittedUnknown is the x-value-omitted of a DLQ stub that stands for
// a record of a compressed batch the client did not decode (its batch holds
// more than BILLING_KAFKA_MAX_BATCH_BYTES once decompressed): its size is
// not known, and nothing can be replayed from it.
const ValueOmittedUnknown = "unknown"
