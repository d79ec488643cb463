package config

import "reflect"

// Var describes one variable, from Config's struct tags: the table that
// `billing run -h` prints and README.md's configuration table is
// generated from.
type Var struct {
	Name     string // BILLING_…
	Part     Part   // the part that holds it
	Default  string // "" when it has none
	Required bool   // must be set
	// RequiredWith names the BILLING_PAYMENT_PROVIDER that requires it ("":
	// none, or always when Required).
	RequiredWith string
	Secret       bool // never logged or shown; comes from a Secret in deploy/
	Desc         string
	field        reflect.StructField
}

// Vars lists every variable of Config, part by part, in declaration order.
func Vars() []Var {
	var out []Var
	ct := reflect.TypeFor[Config]()
	for i := range ct.NumField() {
		pt := ct.Field(i).Type
		p := Part(1) << i
		for j := range pt.NumField() {
			f := pt.Field(j)
			name := f.Tag.Get("envconfig")
			if name == "" {
				continue
			}
			out = append(out, Var{
				Name: name, Part: p, Default: f.Tag.Get("default"), Required: f.Tag.Get("required") == "true",
				RequiredWith: f.Tag.Get("required_with"),
				Secret:       f.Type == reflect.TypeFor[Secret]() || f.Tag.Get("secret") == "true",
				Desc:         f.Tag.Get("desc"), field: f,
			})
		}
	}
	return out
}

// Bound returns the bounds of v, when it is a duration or a count.
func (v Var) Bound() (Bound, bool) { return boundOf(v.Name) }

// Lookup returns the variable called name.
func Lookup(name string) (Var, bool) {
	for _, v := range Vars() {
		if v.Name == name {
			return v, true
		}
	}
	return Var{}, false
}

// Names lists every environment variable of Config, in declaration order.
func Names() []string { return NamesOf(AllParts) }

// NamesOf lists the variables of the parts ps, in declaration order.
func NamesOf(ps Part) []string {
	var out []string
	for _, v := range Vars() {
		if ps&v.Part != 0 {
			out = append(out, v.Name)
		}
	}
	return out
}
