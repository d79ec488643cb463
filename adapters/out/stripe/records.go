package stripe

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	httpgateway "github.com/acme/billing/adapters/out/http"
	"github.com/acme/billing/core/order"
)

// SearchLag is how long a PaymentIntent may take to show in Stripe's
// search: under normal operation less than a minute, during Stripe's
// incidents up to an hour (Stripe's search documentation: not for
// read-after-write flows). ChargesOfOrder may miss attempts younger than
// this; a caller that must see them waits until SearchLag has passed since
// the attempt's key was sent, and asks again, or reads the period with
// ChargesCreated, which lists without delay.
const SearchLag = time.Hour

var _ order.LaggingRecords = (*Client)(nil)

// LookupLag is SearchLag: ChargesOfOrder may miss the PaymentIntents of
// the last hour.
func (c *Client) LookupLag() time.Duration { return SearchLag }

// pageLimit is the size of Stripe's pages: its maximum.
const pageLimit = 100

// maxSearchPages bounds the pages of one order's search.
const maxSearchPages = 100

// listReply is Stripe's list and search_result objects.
type listReply struct {
	Object   string          `json:"object"`
	Data     []paymentIntent `json:"data"`
	HasMore  bool            `json:"has_more"`
	NextPage *string         `json:"next_page"`
}

// ChargesCreated returns one page of the PaymentIntents created in
// [from, to) (GET /v1/payment_intents?created[gte]=&created[lt]=, a hundred
// a page, newest first; the cursor is the last id of the previous page,
// starting_after). Stripe's times are whole seconds: a PaymentIntent
// created at second s is in the period when from <= s < to, both rounded
// up to the second. A 429 is waited out within Stripe's rate limits
// (httpgateway.Paced).
func (c *Client) ChargesCreated(ctx context.Context, from, to time.Time, cursor string) (order.RecordsPage, error) {
	q := url.Values{
		"created[gte]": {strconv.FormatInt(ceilSecond(from), 10)},
		"created[lt]":  {strconv.FormatInt(ceilSecond(to), 10)},
		"limit":        {strconv.Itoa(pageLimit)},
	}
	if cursor != "" {
		if !order.ValidChargeID(cursor) {
			return order.RecordsPage{}, fmt.Errorf("%s: cursor is not a PaymentIntent id", lookupOp)
		}
		q.Set("starting_after", cursor)
	}
	body, err := c.list(ctx, "/v1/payment_intents", q)
	if err != nil {
		return order.RecordsPage{}, err
	}
	page, err := records(body.Data)
	if err != nil {
		return order.RecordsPage{}, err
	}
	if body.HasMore && len(body.Data) > 0 {
		page.Next = body.Data[len(body.Data)-1].ID
	}
	return page, nil
}

// ChargesOfOrder returns the PaymentIntents of one order, oldest first,
// found by Stripe's search on metadata['order_id'] (every page). The
// search is eventually consistent: see SearchLag.
func (c *Client) ChargesOfOrder(ctx context.Context, orderID string) ([]order.PaymentRecord, error) {
	if !order.ValidOrderID(orderID) {
		return nil, fmt.Errorf("%s: order id does not follow the event's rule", lookupOp)
	}
	q := url.Values{"query": {SearchQuery(orderID)}, "limit": {strconv.Itoa(pageLimit)}}
	var out []order.PaymentRecord
	for range maxSearchPages {
		body, err := c.list(ctx, "/v1/payment_intents/search", q)
		if err != nil {
			return nil, fmt.Errorf("order %s: %w", orderID, err)
		}
		page, err := records(body.Data)
		if err != nil {
			return nil, fmt.Errorf("order %s: %w", orderID, err)
		}
		for _, r := range page.Records {
			if r.OrderID == orderID { // the search matched it; the record says so too
				out = append(out, r)
			}
		}
		if !body.HasMore || body.NextPage == nil || *body.NextPage == "" {
			// Stripe answers newest first, in whole seconds: reversed, the
			// attempts of one second keep their order too.
			slices.Reverse(out)
			slices.SortStableFunc(out, func(a, b order.PaymentRecord) int { return a.CreatedAt.Compare(b.CreatedAt) })
			return out, nil
		}
		if !httpgateway.ValidCursor(*body.NextPage) {
			return nil, fmt.Errorf("%s: order %s: next_page is not a printable token: %w", lookupOp, orderID, httpgateway.ErrBadRecord)
		}
		q.Set("page", *body.NextPage)
	}
	return nil, fmt.Errorf("%s: order %s: more than %d pages: %w", lookupOp, orderID, maxSearchPages, httpgateway.ErrBadRecord)
}

// SearchQuery is the search query of one order's PaymentIntents: its id
// quoted, a quote or backslash in it escaped with a backslash (Stripe's
// search query language).
func SearchQuery(orderID string) string {
	esc := strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(orderID)
	return "metadata['order_id']:'" + esc + "'"
}

// list asks one page of path with q, waiting out 429s.
func (c *Client) list(ctx context.Context, path string, q url.Values) (listReply, error) {
	what := "GET " + c.base + path
	var body listReply
	err := httpgateway.Paced(ctx, func() error {
		return c.Do(ctx, httpgateway.Request{Op: lookupOp, Method: http.MethodGet, URL: c.base + path + "?" + q.Encode(),
			Shown: c.base + path, Route: path, Header: c.header()},
			httpgateway.WholeBody(httpgateway.MaxListReplyBytes, func(resp *http.Response, raw []byte) (httpgateway.Verdict, error) {
				v, err := httpgateway.LookupStatus(lookupOp, what, resp)
				if err != nil {
					return v, err
				}
				body = listReply{}
				if len(raw) > httpgateway.MaxListReplyBytes || json.Unmarshal(raw, &body) != nil ||
					(body.Object != "list" && body.Object != "search_result") || body.Data == nil {
					return httpgateway.VerdictHealthy, &order.PermanentError{Op: lookupOp,
						Err: fmt.Errorf("%s: 200 without a list: %w", what, httpgateway.ErrBadRecord)}
				}
				return httpgateway.VerdictHealthy, nil
			}))
	})
	return body, err
}

// records maps PaymentIntents onto records: those without
// metadata[order_id] are not billing's (Foreign); every other field is
// checked (httpgateway.CheckRecord), and a PaymentIntent that fails is an
// error naming the field, never repeating what Stripe sent.
func records(data []paymentIntent) (order.RecordsPage, error) {
	page := order.RecordsPage{Records: make([]order.PaymentRecord, 0, len(data))}
	for i, pi := range data {
		orderID := pi.Metadata["order_id"]
		if orderID == "" {
			page.Foreign++
			continue
		}
		r := order.PaymentRecord{ChargeID: pi.ID, OrderID: orderID, Key: pi.Metadata["event_id"],
			Amount: order.Money{Amount: pi.Amount, Currency: strings.ToUpper(pi.Currency)}, Status: recordStatus(pi.Status)}
		if pi.Created > 0 {
			r.CreatedAt = time.Unix(pi.Created, 0).UTC()
		}
		if bad := httpgateway.CheckRecord(r); bad != "" {
			return order.RecordsPage{}, &order.PermanentError{Op: lookupOp, Err: fmt.Errorf("PaymentIntent %d of the page: %s: %w", i, bad, httpgateway.ErrBadRecord)}
		}
		page.Records = append(page.Records, r)
	}
	return page, nil
}

// recordStatus maps a PaymentIntent's status as Charge does: succeeded is
// money; requires_payment_method (a failed confirmation) and
// requires_action (off session, nobody can act) declined; canceled no
// money; anything else not final, or unknown: pending.
func recordStatus(s string) order.RecordStatus {
	switch s {
	case "succeeded":
		return order.RecordSucceeded
	case "requires_payment_method", "requires_action":
		return order.RecordDeclined
	case "canceled":
		return order.RecordRefused
	}
	return order.RecordPending
}

// ceilSecond is t in Unix seconds, rounded up.
func ceilSecond(t time.Time) int64 {
	s := t.Unix()
	if t.Nanosecond() > 0 {
		s++
	}
	return s
}
