package httpgateway

import (
	"net/http"
	"strconv"
)

// Code labels of the requests counter that are not a status code.
const (
	// CodeNoReply counts requests that got no usable reply: no connection,
	// a timeout, a reply cut short or broken (ErrReplyHeadersTooLarge).
	CodeNoReply = "error"
	// CodeOther counts replies with any status the contract does not name:
	// a gateway choosing its codes must not choose the label set too.
	CodeOther = "other"
)

// contractCodes are the statuses docs/interface.md §6 names, counted as themselves.
var contractCodes = [...]int{200, 201, 400, 401, 402, 403, 404, 409, 422, 429}

// codeLabel is the code label of a reply with status: the status itself
// when docs/interface.md §6 names it or it is a registered 5xx (each tells
// something different about an unwell gateway, and alerts select them as
// 5..), CodeOther for any other, so that the counter's series stay a short
// list whatever a gateway sends (299, 599, 999…).
func codeLabel(status int) string {
	for _, c := range contractCodes {
		if status == c {
			return strconv.Itoa(status)
		}
	}
	if status >= 500 && status < 600 && http.StatusText(status) != "" {
		return strconv.Itoa(status)
	}
	return CodeOther
}

// CodeLabels returns every value codeLabel and the Client give the code
// label; the Client creates each at zero (WithMetrics).
func CodeLabels() []string {
	out := make([]string, 0, len(contractCodes)+14)
	for _, c := range contractCodes {
		out = append(out, strconv.Itoa(c))
	}
	for s := 500; s < 600; s++ {
		if http.StatusText(s) != "" {
			out = append(out, strconv.Itoa(s))
		}
	}
	return append(out, CodeOther, CodeNoReply)
}
