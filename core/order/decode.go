package order

// Decode parses and validates one event value to CONTRACT.md §3. A missing or
// null currency becomes defaultCurrency. Every rule broken is a
// *ValidationError (permanent).
func Decode(raw []byte, defaultCurrency string) (OrderConfirmedEvent, error) {
	panic("TODO: implemented by the decoder task")
}
