package order

import (
	"errors"
	"strconv"
)

// An invoice keeps the gateway's answers to its attempts (`billing invoice
// show`): what a person deciding on a held invoice needs to know is whether
// the gateway ever executed a request under its key. Each answer is a
// short line made here, never the gateway's free text (docs/interface.md §6): the
// HTTP status and the gateway's error code when that is a short token.

// AnswerUnsent is the answer recorded for a request that never left (no
// connection, the breaker open, its send window closed): nothing ran at the
// gateway.
const AnswerUnsent = "unsent"

// AnswerNone is the answer recorded when an attempt ended with neither a
// settle nor a release: its request timed out, was cut, got a 502/504 from
// a proxy or a 409 "in progress", or its sender stopped; the gateway may
// have executed it.
const AnswerNone = "no answer recorded"

// AnswerOf is the line an invoice's history of answers records for the
// gateway's answer to one request: res when err is nil, else err's reply
// (its GatewayReplyError: status and error code), AnswerUnsent for a request that never left,
// and "" when the outcome is unknown (no reply: the next path to take the
// attempt records AnswerNone for it).
func AnswerOf(res ChargeResult, err error) string {
	if err == nil {
		a := "succeeded"
		if res.Status == ChargeDeclined {
			a = "declined"
		}
		if res.StatusCode != 0 {
			a = strconv.Itoa(res.StatusCode)
		}
		if res.Replayed {
			a += " replayed"
		}
		return a
	}
	if re, ok := errors.AsType[*GatewayReplyError](err); ok {
		return withCode(re.StatusCode, re.Code)
	}
	if ce, ok := errors.AsType[*ChargeRefusedError](err); ok && ce.StatusCode != 0 {
		return strconv.Itoa(ce.StatusCode)
	}
	if ChargeEnded(err) {
		return AnswerUnsent
	}
	return ""
}

func withCode(status int, code string) string {
	if code == "" {
		return strconv.Itoa(status)
	}
	return strconv.Itoa(status) + " " + code
}
