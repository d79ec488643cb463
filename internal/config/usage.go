package config

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// Usage writes the table of the variables of the parts ps to w: name,
// default ("required", "required(generic)" when a provider requires it, or
// "-" when unset means derived or off), bounds
// (Bounds; "-" for a variable that is neither a duration nor a count) and
// meaning.
// It reads no environment: help works where the configuration is missing
// or wrong.
func Usage(w io.Writer, ps Part) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "VARIABLE\tDEFAULT\tBOUNDS\tMEANING")
	for _, v := range Vars() {
		if ps&v.Part == 0 {
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", v.Name, v.shownDefault(), v.shownBound(), v.Desc)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("config usage: %w", err)
	}
	for _, r := range relations() {
		if ps&r.parts == r.parts {
			fmt.Fprintln(w, "Also: "+r.rule)
		}
	}
	return nil
}

// relation is a rule between variables of parts that their validate
// methods check, as help states it.
type relation struct {
	parts Part
	rule  string
}

func relations() []relation {
	return []relation{
		{PartKafka, "the main topic, every retry tier (<prefix>.N), the DLQ and the invoice topic are distinct topics"},
		{PartRules, "BILLING_PENDING_RESUME_AFTER is at most a quarter of BILLING_GATEWAY_KEY_TTL"},
	}
}

// shownDefault is the default as help shows it: "required", the value, or
// "-" when unset means derived or off.
func (v Var) shownDefault() string {
	switch {
	case v.Required:
		return "required"
	case v.RequiredWith != "":
		return "required(" + v.RequiredWith + ")"
	case v.Default == "":
		return "-"
	default:
		return v.Default
	}
}

// shownBound is the bounds as help shows them, "-" when v has none.
func (v Var) shownBound() string {
	if b, ok := v.Bound(); ok {
		return b.String()
	}
	return "-"
}
