package config

import (
	"fmt"
	"reflect"
	"strings"
)

// Reference renders the configuration reference table of README.md from
// the struct tags, so the documentation cannot drift from the code.
func Reference() string {
	var b strings.Builder
	b.WriteString("| variable | default | meaning |\n|---|---|---|\n")
	t := reflect.TypeOf(Config{})
	for i := range t.NumField() {
		f := t.Field(i)
		key := f.Tag.Get("envconfig")
		if key == "" {
			continue
		}
		def := f.Tag.Get("default")
		switch {
		case f.Tag.Get("required") == "true":
			def = "required"
		case def == "":
			def = "—"
		default:
			def = "`" + def + "`"
		}
		fmt.Fprintf(&b, "| `%s_%s` | %s | %s |\n", Prefix, key, def, f.Tag.Get("desc"))
	}
	return b.String()
}
