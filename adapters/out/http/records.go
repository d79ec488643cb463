package httpgateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/acme/billing/core/order"
)

var _ order.PaymentRecords = (*Client)(nil)

// lookupOp is the Op of every error of the lookup and the list.
const lookupOp = "payment gateway lookup"

// MaxListReplyBytes bounds a reply of the lookup or the list: a page of a
// hundred records is tens of KiB; a provider's page of full objects
// (Stripe's PaymentIntents) a few hundred.
const MaxListReplyBytes = 8 << 20

// MaxCursorBytes bounds a provider's paging token: it is sent back in a
// query, and a longer one is a provider fault.
const MaxCursorBytes = 1024

// maxOrderPages bounds the pages ChargesOfOrder follows: a hundred pages of
// attempts for one order is a provider looping, not an order.
const maxOrderPages = 100

// ErrRateLimited is wrapped by the *order.TransientError of a 429 from the
// lookup or the list; Paced waits and asks again.
var ErrRateLimited = errors.New("rate limited")

// ErrBadRecord is wrapped by the error of a lookup or list reply that
// breaks the protocol (a record whose charge id, order id, key, amount,
// currency, status or time billing does not accept, an unreadable page):
// the error names the field and never repeats the provider's text.
var ErrBadRecord = errors.New("provider record refused")

// listReply is the body of the lookup and the list (docs/interface.md §6).
type listReply struct {
	Charges []struct {
		ChargeID       string `json:"charge_id"`
		OrderID        string `json:"order_id"`
		IdempotencyKey string `json:"idempotency_key"`
		Amount         int64  `json:"amount"`
		Currency       string `json:"currency"`
		Status         string `json:"status"`
		CreatedAt      string `json:"created_at"`
	} `json:"charges"`
	NextCursor *string `json:"next_cursor"`
}

// ChargesOfOrder returns every attempt the gateway recorded for orderID
// (GET /charges?order_id=), following next_cursor. The gateway's lookup is
// consistent: an attempt it answered is there.
func (c *Client) ChargesOfOrder(ctx context.Context, orderID string) ([]order.PaymentRecord, error) {
	if !order.ValidOrderID(orderID) {
		return nil, fmt.Errorf("%s: order id does not follow the event's rule", lookupOp)
	}
	var out []order.PaymentRecord
	cursor := ""
	for range maxOrderPages {
		q := url.Values{"order_id": {orderID}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		page, err := c.list(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("order %s: %w", orderID, err)
		}
		out = append(out, page.Records...)
		if cursor = page.Next; cursor == "" {
			return out, nil
		}
	}
	return nil, fmt.Errorf("%s: order %s: more than %d pages: %w", lookupOp, orderID, maxOrderPages, ErrBadRecord)
}

// ChargesCreated returns one page of the attempts created in [from, to)
// (GET /charges?created_gte=&created_lt=&cursor=), times in RFC 3339 with
// nanoseconds, UTC. A 429 is waited out (Paced).
func (c *Client) ChargesCreated(ctx context.Context, from, to time.Time, cursor string) (order.RecordsPage, error) {
	q := url.Values{"created_gte": {from.UTC().Format(time.RFC3339Nano)}, "created_lt": {to.UTC().Format(time.RFC3339Nano)}}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	return c.list(ctx, q)
}

// list asks GET /charges with q, waiting out 429s, and checks every record.
func (c *Client) list(ctx context.Context, q url.Values) (order.RecordsPage, error) {
	var page order.RecordsPage
	err := Paced(ctx, func() error {
		hdr := http.Header{}
		hdr.Set("Accept", "application/json")
		return c.Do(ctx, Request{Op: lookupOp, Method: http.MethodGet, URL: c.endpoint + "?" + q.Encode(),
			Shown: c.redacted, Route: "/charges", Header: hdr},
			WholeBody(MaxListReplyBytes, func(resp *http.Response, raw []byte) (Verdict, error) {
				v, err := LookupStatus(lookupOp, "GET "+c.redacted, resp)
				if err != nil {
					return v, err
				}
				page, err = parseList(raw)
				return VerdictHealthy, err
			}))
	})
	return page, err
}

// LookupStatus maps the status of a lookup or list reply that is not 200:
// 429 (ErrRateLimited) and 5xx transient and unhealthy, 401 and 403 an
// outage of the gateway (the service's credentials), any other a
// *order.PermanentError. what names the request ("GET https://…/charges").
// The provider's text is left out.
func LookupStatus(op, what string, resp *http.Response) (Verdict, error) {
	status := resp.StatusCode
	ra := RetryAfter(resp.Header.Get("Retry-After"), time.Now())
	switch {
	case status == http.StatusOK:
		return VerdictHealthy, nil
	case status == http.StatusTooManyRequests:
		return VerdictUnhealthy, &order.TransientError{Op: op, RetryAfter: ra,
			Err: fmt.Errorf("%s: 429: %w", what, ErrRateLimited)}
	case status >= 500:
		return VerdictUnhealthy, &order.TransientError{Op: op, RetryAfter: ra,
			Err: fmt.Errorf("%s: %d %s", what, status, http.StatusText(status))}
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return VerdictRefused, &order.OutageError{Dependency: order.DependencyGateway, RetryAfter: ra,
			Err: fmt.Errorf("%s: %s: %d %s: credentials refused", op, what, status, http.StatusText(status))}
	}
	return VerdictHealthy, &order.PermanentError{Op: op, Err: fmt.Errorf("%s: %d %s", what, status, http.StatusText(status))}
}

// parseList checks a 200 reply of the lookup or the list.
func parseList(raw []byte) (order.RecordsPage, error) {
	if len(raw) > MaxListReplyBytes {
		return order.RecordsPage{}, &order.PermanentError{Op: lookupOp, Err: fmt.Errorf("reply over %d bytes: %w", MaxListReplyBytes, ErrBadRecord)}
	}
	var body listReply
	if err := json.Unmarshal(raw, &body); err != nil || body.Charges == nil {
		return order.RecordsPage{}, &order.PermanentError{Op: lookupOp, Err: fmt.Errorf("reply is not a JSON list of charges: %w", ErrBadRecord)}
	}
	page := order.RecordsPage{Records: make([]order.PaymentRecord, 0, len(body.Charges))}
	for i, ch := range body.Charges {
		created, err := time.Parse(time.RFC3339Nano, ch.CreatedAt)
		rec := order.PaymentRecord{ChargeID: ch.ChargeID, OrderID: ch.OrderID, Key: ch.IdempotencyKey,
			Amount: order.Money{Amount: ch.Amount, Currency: ch.Currency}, Status: order.RecordStatus(ch.Status), CreatedAt: created}
		bad := CheckRecord(rec)
		if bad == "" && err != nil {
			bad = "created_at is not RFC 3339"
		}
		if bad == "" && rec.Status != order.RecordSucceeded && rec.Status != order.RecordDeclined && rec.Status != order.RecordRefused {
			bad = "status is not succeeded, declined or refused"
		}
		if bad != "" {
			return order.RecordsPage{}, &order.PermanentError{Op: lookupOp, Err: fmt.Errorf("record %d: %s: %w", i, bad, ErrBadRecord)}
		}
		page.Records = append(page.Records, rec)
	}
	if body.NextCursor != nil {
		if !ValidCursor(*body.NextCursor) {
			return order.RecordsPage{}, &order.PermanentError{Op: lookupOp, Err: fmt.Errorf("next_cursor is not 1–%d bytes of printable ASCII: %w", MaxCursorBytes, ErrBadRecord)}
		}
		page.Next = *body.NextCursor
	}
	return page, nil
}

// CheckRecord says which field of r billing does not accept from a
// provider, "" when none: the charge id and the key by the charge id rule
// (the key may be empty), the order id by the event's rule, a positive
// amount, a three-letter upper-case currency, a creation time.
func CheckRecord(r order.PaymentRecord) string {
	switch {
	case !order.ValidChargeID(r.ChargeID):
		return "charge id is not 1–255 bytes of printable ASCII"
	case !order.ValidOrderID(r.OrderID):
		return "order id does not follow the event's rule"
	case r.Key != "" && !order.ValidChargeID(r.Key):
		return "idempotency key is not 1–255 bytes of printable ASCII"
	case r.Amount.Amount <= 0:
		return "amount is not positive"
	case !order.ValidCurrency(r.Amount.Currency):
		return "currency is not three upper-case letters"
	case r.CreatedAt.IsZero():
		return "no creation time"
	}
	return ""
}

// ValidCursor reports whether s is a paging token billing sends back: 1 to
// MaxCursorBytes bytes of printable ASCII.
func ValidCursor(s string) bool {
	if s == "" || len(s) > MaxCursorBytes {
		return false
	}
	for i := range len(s) {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// Paced runs call until it is not rate limited (ErrRateLimited), waiting
// between tries what the provider's Retry-After asks, or else 1 s doubling
// up to 32 s, for at most MaxPacedTries tries: a reconciliation pages
// through a provider's records within its rate limits instead of failing
// on the first 429. ctx ends the wait.
func Paced(ctx context.Context, call func() error) error {
	wait := time.Second
	for try := 1; ; try++ {
		err := call()
		if !errors.Is(err, ErrRateLimited) || try >= MaxPacedTries {
			return err
		}
		d := wait
		if te, ok := errors.AsType[*order.TransientError](err); ok && te.RetryAfter > 0 {
			d = te.RetryAfter
		}
		wait = min(2*wait, 32*time.Second)
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
	}
}

// MaxPacedTries is how many times Paced asks before it gives up on a
// provider that keeps refusing for its rate limit (about two minutes of
// waiting without Retry-After).
const MaxPacedTries = 8
