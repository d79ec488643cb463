package httpgateway

// Kinds of the protocol errors the Client counts (WithMetrics): replies
// of the gateway that break docs/interface.md §6. A charge id that cannot be kept
// costs the invoice its charge id and nothing else (the charge stands); the
// other kinds are replies without proof of a charge, transient for the
// event, unless a 200 or 201 said "succeeded" before its body broke.
const (
	// ProtocolChargeIDMissing: a 200 or 201 success without a charge id
	// (absent, null or empty).
	ProtocolChargeIDMissing = "charge_id_missing"
	// ProtocolChargeIDTooLong: a charge id over order.MaxChargeIDBytes.
	ProtocolChargeIDTooLong = "charge_id_too_long"
	// ProtocolChargeIDNotPrintable: a charge id with a byte outside
	// printable ASCII (NUL, control characters, anything not ASCII,
	// invalid UTF-8).
	ProtocolChargeIDNotPrintable = "charge_id_not_printable"
	// ProtocolChargeIDNotString: a charge id that is not a JSON string.
	ProtocolChargeIDNotString = "charge_id_not_a_string"
	// ProtocolChargeIDCredentials: a charge id that holds a form of the
	// credentials of the gateway's URL (an echo short enough to pass for an
	// id): kept, it would be published with the invoice's event.
	ProtocolChargeIDCredentials = "charge_id_holds_credentials"
	// ProtocolChargeStatus: a 200 or 201 whose status is not "succeeded".
	ProtocolChargeStatus = "charge_status"
	// ProtocolReplyUnreadable: a 200 or 201 whose body is not a JSON object,
	// or runs past MaxReplyBytes.
	ProtocolReplyUnreadable = "reply_unreadable"
	// ProtocolUnexpectedStatus: a status the contract has no row for (a
	// 2xx other than 200 and 201, a 1xx or 3xx).
	ProtocolUnexpectedStatus = "unexpected_status"
	// ProtocolReplyHeadersTooLarge: a reply over MaxReplyHeaderBytes of
	// headers (ErrReplyHeadersTooLarge).
	ProtocolReplyHeadersTooLarge = "reply_headers_too_large"
)

// ProtocolErrorKinds returns every kind the Client counts; it creates each
// at zero.
func ProtocolErrorKinds() []string {
	return []string{
		ProtocolChargeIDMissing, ProtocolChargeIDTooLong, ProtocolChargeIDNotPrintable, ProtocolChargeIDNotString, ProtocolChargeIDCredentials,
		ProtocolChargeStatus, ProtocolReplyUnreadable, ProtocolUnexpectedStatus, ProtocolReplyHeadersTooLarge,
	}
}
