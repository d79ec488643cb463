package order_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/acme/billing/core/order"
)

// TestAnswerOf: the line an invoice's history records for each kind of
// answer, never the gateway's free text.
func TestAnswerOf(t *testing.T) {
	t.Parallel()
	refused := &order.PermanentError{Op: "charge", Err: &order.ChargeRefusedError{Kind: order.RefusalRejected, StatusCode: 404,
		Err: errors.New("404 Not Found (no such customer: call +1 555 0100)")}}
	tests := []struct {
		name string
		res  order.ChargeResult
		err  error
		want string
	}{
		{"201", order.ChargeResult{Status: order.ChargeSucceeded, StatusCode: 201}, nil, "201"},
		{"200 replayed", order.ChargeResult{Status: order.ChargeSucceeded, StatusCode: 200, Replayed: true}, nil, "200 replayed"},
		{"declined, status unknown", order.ChargeResult{Status: order.ChargeDeclined}, nil, "declined"},
		{"refused, without a reply mark", order.ChargeResult{}, refused, "404"},
		{"refused, with its code", order.ChargeResult{}, withReply(refused, 404, "customer_missing"), "404 customer_missing"},
		{"a code that is free text", order.ChargeResult{}, withReply(refused, 404, "no such customer"), "404"},
		{"503 answered unexecuted", order.ChargeResult{},
			order.MarkChargeEnded(&order.TransientError{Op: "charge", Err: &order.GatewayReplyError{StatusCode: 503}}), "503"},
		{"never sent", order.ChargeResult{}, order.MarkChargeEnded(&order.TransientError{Op: "charge", Err: errors.New("dial: refused")}), order.AnswerUnsent},
		{"no reply", order.ChargeResult{}, &order.TransientError{Op: "charge", Err: context.DeadlineExceeded}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := order.AnswerOf(tt.res, tt.err); got != tt.want {
				t.Errorf("AnswerOf() = %q, want %q", got, tt.want)
			}
		})
	}
}

// withReply wraps refused's cause with the reply the gateway client
// attaches: its status and its code, when GatewayCode keeps it.
func withReply(refused *order.PermanentError, status int, code string) error {
	inner, _ := errors.AsType[*order.ChargeRefusedError](refused)
	ce := *inner
	ce.Err = fmt.Errorf("%w", &order.GatewayReplyError{StatusCode: status, Code: order.GatewayCode(code)})
	return &order.PermanentError{Op: refused.Op, Err: &ce}
}
