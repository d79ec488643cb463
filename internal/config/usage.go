package config

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/kelseyhightower/envconfig"
)

// usageFormat is envconfig's usage template: one line per variable, its
// default ("required", or "-" when unset means derived or off) and the
// meaning from the struct's desc tag.
const usageFormat = `VARIABLE	DEFAULT	MEANING
{{range .}}{{usage_key .}}	{{if usage_required .}}required{{else}}{{or (usage_default .) "-"}}{{end}}	{{usage_description .}}
{{end}}`

// Usage writes the table of BILLING_* variables to w, from Config's tags.
// It reads no environment: help works where the configuration is missing
// or wrong.
func Usage(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if err := envconfig.Usagef(Prefix, &Config{}, tw, usageFormat); err != nil {
		return fmt.Errorf("config usage: %w", err)
	}
	return tw.Flush()
}
