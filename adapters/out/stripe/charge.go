package stripe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	httpgateway "github.com/acme/billing/adapters/out/http"
	"github.com/acme/billing/core/order"
)

// ErrNoPaymentMethod is wrapped by the refusal of a charge for a customer
// without a default payment method: nothing was sent under the key.
var ErrNoPaymentMethod = errors.New("the customer has no default payment method (invoice_settings.default_payment_method)")

// paymentIntent is the part of a PaymentIntent the adapter reads.
type paymentIntent struct {
	ID       string            `json:"id"`
	Object   string            `json:"object"`
	Amount   int64             `json:"amount"`
	Currency string            `json:"currency"`
	Status   string            `json:"status"`
	Created  int64             `json:"created"`
	Metadata map[string]string `json:"metadata"`
}

// Charge creates and confirms one PaymentIntent for req under
// req.IdempotencyKey, and maps Stripe's answer by HTTP status first
// (docs/interface.md §6, the Stripe paragraph; README "Stripe"):
//
//   - 200 succeeded: ChargeSucceeded, the PaymentIntent's id the charge id
//     (kept only when it follows the charge id rule; Replayed when Stripe
//     says Idempotent-Replayed). 200 processing: the PaymentIntent is read
//     once more (GET /v1/payment_intents/{id}), and its state then decides;
//     still processing, a *order.TransientError (asked again under the same
//     key). 200 requires_action or requires_payment_method: ChargeDeclined.
//     Any other state: held (order.RefusalIndeterminate). A 200 whose body
//     is not a PaymentIntent: transient, as for the generic gateway.
//   - 402 (card_error, or any other type): ChargeDeclined.
//   - 400 idempotency_error: held (order.RefusalKeyReused, as a 422).
//   - 409, 429, 5xx: *order.TransientError (RetryAfter from Retry-After).
//     Stripe-Should-Retry: false on them says that asking again under the
//     key would only replay this answer (Stripe saves a 500's result): held
//     (order.RefusalIndeterminate).
//   - 401, 403: *order.OutageError of the gateway.
//   - Any other 4xx: rejected (order.RefusalRejected), unless
//     Stripe-Should-Retry: true, which makes it transient.
//   - No reply, the breaker open: as httpgateway.Caller.Do says.
//
// Before the first charge of a customer (and after DefaultMethodTTL), the
// customer's default payment method is read (GET /v1/customers/{id}); a
// customer Stripe does not know (404) or without one is rejected, and any
// error of that read is marked order.MarkChargeEnded: the key was not sent.
func (c *Client) Charge(ctx context.Context, req order.ChargeRequest) (order.ChargeResult, error) {
	pm, err := c.paymentMethod(ctx, req.CustomerID)
	if err != nil {
		return order.ChargeResult{}, order.MarkChargeEnded(err)
	}
	key := req.IdempotencyKey.String()
	form := url.Values{
		"amount":                             {strconv.FormatInt(req.Amount.Amount, 10)},
		"currency":                           {strings.ToLower(req.Amount.Currency)},
		"customer":                           {req.CustomerID},
		"payment_method":                     {pm},
		"confirm":                            {"true"},
		"off_session":                        {"true"},
		"automatic_payment_methods[enabled]": {"true"},
		"automatic_payment_methods[allow_redirects]": {"never"},
		"metadata[order_id]":                         {req.OrderID},
		"metadata[event_id]":                         {key},
	}
	hdr := c.header()
	hdr.Set("Content-Type", "application/x-www-form-urlencoded")
	hdr.Set(httpgateway.HeaderIdempotencyKey, key)
	what := "POST " + c.base + "/v1/payment_intents"
	var (
		res order.ChargeResult
		pi  paymentIntent
	)
	err = c.Do(ctx, httpgateway.Request{Op: chargeOp, Method: http.MethodPost, URL: c.base + "/v1/payment_intents",
		Shown: c.base + "/v1/payment_intents", Route: "/v1/payment_intents", Header: hdr, Body: []byte(form.Encode()),
		Key: key, OrderID: req.OrderID},
		httpgateway.WholeBody(0, func(resp *http.Response, raw []byte) (httpgateway.Verdict, error) {
			var v httpgateway.Verdict
			res, pi, v, err = judgeCharge(what, resp, raw)
			return v, err
		}))
	if err != nil {
		return order.ChargeResult{}, err
	}
	if pi.Status == "processing" {
		return c.recheck(ctx, what, pi.ID, res.Replayed)
	}
	return res, nil
}

// recheck reads a PaymentIntent that was processing when it was answered
// (or replayed: Stripe replays the answer it saved for the key, not the
// PaymentIntent's state now) and maps its state now.
func (c *Client) recheck(ctx context.Context, what, id string, replayed bool) (order.ChargeResult, error) {
	processing := &order.TransientError{Op: chargeOp, Err: fmt.Errorf("%s: 200 with PaymentIntent status processing", what)}
	if !order.ValidChargeID(id) || strings.ContainsAny(id, "/?#%") {
		return order.ChargeResult{}, processing
	}
	get := "GET " + c.base + "/v1/payment_intents/{id}"
	var pi paymentIntent
	err := c.Do(ctx, httpgateway.Request{Op: chargeOp, Method: http.MethodGet, URL: c.base + "/v1/payment_intents/" + id,
		Shown: c.base + "/v1/payment_intents/{id}", Route: "/v1/payment_intents/{id}", Header: c.header()},
		httpgateway.WholeBody(0, func(resp *http.Response, raw []byte) (httpgateway.Verdict, error) {
			if resp.StatusCode != http.StatusOK {
				v, _ := httpgateway.LookupStatus(chargeOp, get, resp)
				return v, processing // the charge's answer stands
			}
			if json.Unmarshal(raw, &pi) != nil || pi.ID != id {
				return httpgateway.VerdictHealthy, processing
			}
			return httpgateway.VerdictHealthy, nil
		}))
	if err != nil {
		if errors.Is(err, processing) {
			return order.ChargeResult{}, processing
		}
		// No reply, the breaker: the processing answer stands, as a
		// transient error (never an outage: the charge itself was answered).
		return order.ChargeResult{}, &order.TransientError{Op: chargeOp, Err: fmt.Errorf("%w; reading it again: %w", processing.Err, err)}
	}
	if pi.Status == "processing" {
		return order.ChargeResult{}, processing
	}
	res, err := intentOutcome(get, pi)
	res.Replayed = replayed
	return res, err
}

// judgeCharge maps one reply of POST /v1/payment_intents.
func judgeCharge(what string, resp *http.Response, raw []byte) (order.ChargeResult, paymentIntent, httpgateway.Verdict, error) {
	status := resp.StatusCode
	retryAfter := httpgateway.RetryAfter(resp.Header.Get("Retry-After"), time.Now())
	transient := func(format string, args ...any) error {
		return &order.TransientError{Op: chargeOp, RetryAfter: retryAfter, Err: fmt.Errorf("%s: "+format, append([]any{what}, args...)...)}
	}
	typ, _, tokens := errorTokens(raw)
	should := shouldRetry(resp.Header)
	switch {
	case status == http.StatusOK:
		var pi paymentIntent
		if len(raw) > httpgateway.MaxReplyBytes || json.Unmarshal(raw, &pi) != nil || pi.Object != "payment_intent" || pi.Status == "" {
			return order.ChargeResult{}, pi, httpgateway.VerdictHealthy, transient("200 without a PaymentIntent")
		}
		if pi.Status == "processing" {
			// Charge reads it again; the result is only a placeholder.
			return order.ChargeResult{Replayed: replayed(resp)}, pi, httpgateway.VerdictHealthy, nil
		}
		res, err := intentOutcome(what, pi)
		res.Replayed = replayed(resp)
		return res, pi, httpgateway.VerdictHealthy, err

	case status == http.StatusPaymentRequired:
		// A card_error is Stripe's decline; a 402 of another type still
		// says the payment failed and no money moved.
		return order.ChargeResult{Status: order.ChargeDeclined, Replayed: replayed(resp)}, paymentIntent{}, httpgateway.VerdictHealthy, nil

	case status == http.StatusBadRequest && typ == "idempotency_error":
		return order.ChargeResult{}, paymentIntent{}, httpgateway.VerdictHealthy, &order.PermanentError{Op: chargeOp, Err: &order.ChargeRefusedError{
			Kind: order.RefusalKeyReused, StatusCode: status,
			Err: fmt.Errorf("%s: %s%s: the key was used with other parameters", what, statusText(status), tokens)}}

	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		// Every call would meet it: the breaker opens at once.
		return order.ChargeResult{}, paymentIntent{}, httpgateway.VerdictRefused, order.MarkChargeEnded(&order.OutageError{
			Dependency: order.DependencyGateway, RetryAfter: retryAfter,
			Err: fmt.Errorf("%s: %s: %s%s: the API key is refused", chargeOp, what, statusText(status), tokens)})

	case status == http.StatusConflict || status == http.StatusTooManyRequests || status >= 500:
		v := httpgateway.VerdictHealthy // 409: a request under the key is in progress
		if status != http.StatusConflict {
			v = httpgateway.VerdictUnhealthy
		}
		if should < 0 {
			// Stripe saved this answer for the key (a 500's, typically):
			// every attempt under it would get the same, and it does not
			// say whether money moved.
			return order.ChargeResult{}, paymentIntent{}, v, &order.PermanentError{Op: chargeOp, Err: &order.ChargeRefusedError{
				Kind: order.RefusalIndeterminate, StatusCode: status,
				Err: fmt.Errorf("%s: %s%s with Stripe-Should-Retry: false", what, statusText(status), tokens)}}
		}
		err := transient("%s%s", statusText(status), tokens)
		if status == http.StatusTooManyRequests {
			err = order.MarkChargeEnded(err) // refused before it ran: nothing of it is left at Stripe
		}
		return order.ChargeResult{}, paymentIntent{}, v, err

	case status >= 400 && status < 500:
		if should > 0 {
			return order.ChargeResult{}, paymentIntent{}, httpgateway.VerdictHealthy, order.MarkChargeEnded(
				transient("%s%s with Stripe-Should-Retry: true", statusText(status), tokens))
		}
		// Refused unexecuted: Stripe saves no result for a request that
		// failed validation, so no money moved under the key.
		return order.ChargeResult{}, paymentIntent{}, httpgateway.VerdictHealthy, &order.PermanentError{Op: chargeOp, Err: &order.ChargeRefusedError{
			Kind: order.RefusalRejected, StatusCode: status, Err: fmt.Errorf("%s: %s%s", what, statusText(status), tokens)}}

	case status >= 200 && status < 300:
		return order.ChargeResult{}, paymentIntent{}, httpgateway.VerdictHealthy, transient("%s, want 200", statusText(status))
	}
	// 1xx, 3xx: not Stripe; counted against it so that a wrong base URL
	// becomes an outage rather than a stream of dead letters.
	return order.ChargeResult{}, paymentIntent{}, httpgateway.VerdictUnhealthy, transient("unexpected %s", statusText(status))
}

// intentOutcome maps a PaymentIntent's final state onto a charge result.
func intentOutcome(what string, pi paymentIntent) (order.ChargeResult, error) {
	switch pi.Status {
	case "succeeded":
		id := pi.ID
		if !order.ValidChargeID(id) {
			id = "" // charged all the same: the money moved (docs/interface.md §6)
		}
		return order.ChargeResult{Status: order.ChargeSucceeded, ChargeID: id}, nil
	case "requires_action", "requires_payment_method":
		// Off session nobody can authenticate or pick another card: the
		// payment failed, no money moved.
		return order.ChargeResult{Status: order.ChargeDeclined}, nil
	}
	state := httpgateway.Token(pi.Status)
	if state == "" {
		state = "not a token"
	}
	return order.ChargeResult{}, &order.PermanentError{Op: chargeOp, Err: &order.ChargeRefusedError{
		Kind: order.RefusalIndeterminate, StatusCode: http.StatusOK,
		Err: fmt.Errorf("%s: 200 with PaymentIntent status %s, which billing does not map", what, state)}}
}

func replayed(resp *http.Response) bool {
	return strings.EqualFold(resp.Header.Get(httpgateway.HeaderReplayed), "true")
}

// customer is the part of a Customer the adapter reads.
type customer struct {
	ID              string `json:"id"`
	InvoiceSettings struct {
		DefaultPaymentMethod json.RawMessage `json:"default_payment_method"`
	} `json:"invoice_settings"`
}

// paymentMethod returns the customer's default payment method, from the
// cache or from Stripe. The request expands it, so that the answer is an
// object or an id, and null when there is none.
func (c *Client) paymentMethod(ctx context.Context, customerID string) (string, error) {
	now := time.Now()
	if pm, ok := c.methods.get(customerID, now); ok {
		return pm, nil
	}
	what := "GET " + c.base + "/v1/customers/{id}"
	var pm string
	err := c.Do(ctx, httpgateway.Request{Op: customerOp, Method: http.MethodGet,
		URL:   c.base + "/v1/customers/" + url.PathEscape(customerID) + "?expand%5B%5D=invoice_settings.default_payment_method",
		Shown: c.base + "/v1/customers/{id}", Route: "/v1/customers/{id}", Header: c.header()},
		httpgateway.WholeBody(0, func(resp *http.Response, raw []byte) (httpgateway.Verdict, error) {
			var (
				v   httpgateway.Verdict
				err error
			)
			pm, v, err = judgeCustomer(what, resp, raw)
			return v, err
		}))
	if err != nil {
		return "", err
	}
	c.methods.put(customerID, pm, now)
	return pm, nil
}

// judgeCustomer maps one reply of GET /v1/customers/{id}.
func judgeCustomer(what string, resp *http.Response, raw []byte) (string, httpgateway.Verdict, error) {
	status := resp.StatusCode
	_, _, tokens := errorTokens(raw)
	switch {
	case status == http.StatusOK:
		var cu customer
		if len(raw) > httpgateway.MaxReplyBytes || json.Unmarshal(raw, &cu) != nil || cu.ID == "" {
			return "", httpgateway.VerdictHealthy, &order.TransientError{Op: customerOp, Err: fmt.Errorf("%s: 200 without a customer", what)}
		}
		pm, ok := methodID(cu.InvoiceSettings.DefaultPaymentMethod)
		if !ok {
			return "", httpgateway.VerdictHealthy, &order.PermanentError{Op: customerOp, Err: &order.ChargeRefusedError{
				Kind: order.RefusalRejected, StatusCode: status, Err: fmt.Errorf("%s: %w", what, ErrNoPaymentMethod)}}
		}
		return pm, httpgateway.VerdictHealthy, nil
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return "", httpgateway.VerdictRefused, &order.OutageError{Dependency: order.DependencyGateway,
			RetryAfter: httpgateway.RetryAfter(resp.Header.Get("Retry-After"), time.Now()),
			Err:        fmt.Errorf("%s: %s: %s%s: the API key is refused", customerOp, what, statusText(status), tokens)}
	case status == http.StatusTooManyRequests || status >= 500 || status == http.StatusConflict:
		v := httpgateway.VerdictUnhealthy
		if status == http.StatusConflict {
			v = httpgateway.VerdictHealthy
		}
		return "", v, &order.TransientError{Op: customerOp, RetryAfter: httpgateway.RetryAfter(resp.Header.Get("Retry-After"), time.Now()),
			Err: fmt.Errorf("%s: %s%s", what, statusText(status), tokens)}
	case status >= 400 && status < 500:
		// 404: the event's customer_id is no customer of this account.
		return "", httpgateway.VerdictHealthy, &order.PermanentError{Op: customerOp, Err: &order.ChargeRefusedError{
			Kind: order.RefusalRejected, StatusCode: status, Err: fmt.Errorf("%s: %s%s", what, statusText(status), tokens)}}
	}
	return "", httpgateway.VerdictUnhealthy, &order.TransientError{Op: customerOp, Err: fmt.Errorf("%s: unexpected %s", what, statusText(status))}
}

// methodID reads default_payment_method: an id, or an expanded object with
// one; false for null, or for an id billing would not send.
func methodID(raw json.RawMessage) (string, bool) {
	var id string
	if json.Unmarshal(raw, &id) != nil {
		var obj struct {
			ID string `json:"id"`
		}
		if json.Unmarshal(raw, &obj) != nil {
			return "", false
		}
		id = obj.ID
	}
	return id, order.ValidChargeID(id) && !strings.ContainsAny(id, " ")
}
