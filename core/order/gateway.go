package order

import (
	"fmt"
	"strconv"
)

// What billing keeps of a payment gateway's answers (docs/interface.md §6). A
// gateway, or anything in front of it, may write anything into its replies,
// the service's own credentials included (a debug echo of the request). So
// none of its free text — bodies, messages, echoed headers — goes beyond
// the gateway adapter: errors (hence x-error, logs, spans), invoice reasons
// and invoice events carry the HTTP status and at most the gateway's error
// code when it is a short token; a charge id is kept only when it is one
// (ValidChargeID).

// MaxGatewayCodeBytes is the longest gateway error code billing repeats.
const MaxGatewayCodeBytes = 64

// GatewayCode returns code when it is a short token, [A-Za-z0-9_.-]{1,64}
// (an error code such as "card_declined" or "idempotency_key_reused"), and ""
// otherwise: anything longer or with other characters is free text.
func GatewayCode(code string) string {
	if len(code) == 0 || len(code) > MaxGatewayCodeBytes {
		return ""
	}
	for i := range len(code) {
		if !isCodeByte(code[i]) {
			return ""
		}
	}
	return code
}

// isCodeByte reports whether c may be part of a gateway error code.
func isCodeByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-'
}

// MaxChargeIDBytes is the longest charge id billing keeps.
const MaxChargeIDBytes = 255

// ValidChargeID reports whether id may be kept as an invoice's charge id:
// 1 to MaxChargeIDBytes bytes of printable ASCII (0x20 to 0x7E). A gateway's
// success with any other charge id is still a charge, kept without its id.
func ValidChargeID(id string) bool {
	if len(id) == 0 || len(id) > MaxChargeIDBytes {
		return false
	}
	for i := range len(id) {
		if id[i] < 0x20 || id[i] > 0x7e {
			return false
		}
	}
	return true
}

// GatewayReplyError is a reply of the payment gateway that was neither a
// charge nor a decline, as far as billing repeats it: its HTTP status and
// the error code it gave, when that is a short token (GatewayCode). The
// gateway client wraps one in the TransientError, ChargeRefusedError or
// OutageError it returns for a reply, so that whoever records the
// gateway's answers finds them with errors.As.
type GatewayReplyError struct {
	StatusCode int
	Code       string // "" when the gateway gave none, or none that is a short token
}

func (e *GatewayReplyError) Error() string {
	if e.Code == "" {
		return "gateway answered " + strconv.Itoa(e.StatusCode)
	}
	return fmt.Sprintf("gateway answered %d, error code %s", e.StatusCode, e.Code)
}
