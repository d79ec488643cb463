package deploy

import (
	"os"
	"strings"
	"testing"

	"github.com/acme/billing/internal/config"
)

// rootReadme is the repository's README.md, whose table "What each command
// reads" is generated from cmd/billing's command table.
const rootReadme = "../README.md"

// commandParts returns the parts of the configuration the billing command
// that args run reads, from README.md's generated table.
func commandParts(t *testing.T, args []string) config.Part {
	t.Helper()
	b, err := os.ReadFile(rootReadme)
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok1 := strings.Cut(string(b), "<!-- command-config:begin")
	table, _, ok2 := strings.Cut(table, "<!-- command-config:end -->")
	if !ok1 || !ok2 {
		t.Fatalf("%s: no table of what each command reads", rootReadme)
	}
	name := "run"
	if len(args) > 0 {
		name = args[0]
	}
	if len(args) > 1 && !strings.HasPrefix(args[1], "-") {
		name += " " + args[1]
	}
	for l := range strings.Lines(table) {
		cells := strings.Split(l, "|")
		if len(cells) < 4 || strings.TrimSpace(cells[1]) != "`billing "+name+"`" {
			continue
		}
		return parseParts(t, strings.TrimSpace(cells[2]))
	}
	t.Fatalf("%s: command %q not in the table of what each command reads", rootReadme, name)
	return 0
}

// parseParts reads the parts as the table writes them: "all", "none",
// "Database+Log".
func parseParts(t *testing.T, s string) config.Part {
	t.Helper()
	switch s {
	case "all":
		return config.AllParts
	case "none":
		return 0
	}
	var ps config.Part
	for name := range strings.SplitSeq(s, "+") {
		var found bool
		for p := config.Part(1); p != 0 && p <= config.AllParts; p <<= 1 {
			if p.String() == name {
				ps, found = ps|p, true
			}
		}
		if !found {
			t.Fatalf("part %q of %q: no such part", name, s)
		}
	}
	return ps
}

// checkCommandEnv checks that a container running billing with args gets
// the secrets of the parts its command reads and no other, from Secret
// keys that are not optional where the variable is required, and every
// required variable of those parts.
func checkCommandEnv(t *testing.T, container string, args []string, env podEnv, secretOf func(string) string) {
	t.Helper()
	ps := commandParts(t, args)
	provider := env.fromConfigMap["BILLING_PAYMENT_PROVIDER"]
	if provider == "" {
		provider = configVar(t, "BILLING_PAYMENT_PROVIDER").Default
	}
	for _, v := range config.Vars() {
		ref, inSecret := env.fromSecret[v.Name]
		_, inCM := env.fromConfigMap[v.Name]
		switch {
		case v.Secret && ps&v.Part == 0 && inSecret:
			t.Errorf("container %s (billing %s reads %s): carries secret %s, which its command does not read", container, strings.Join(args, " "), ps, v.Name)
		case v.Secret && inCM:
			t.Errorf("container %s: secret %s in a ConfigMap", container, v.Name)
		case ps&v.Part != 0 && (v.Required || v.RequiredWith == provider) && !inCM && (!inSecret || isTrue(ref.Optional)):
			t.Errorf("container %s: required %s is provided by neither the ConfigMap nor a non-optional Secret key", container, v.Name)
		case inSecret && secretOf != nil && ref.Name != secretOf(v.Name):
			t.Errorf("container %s: %s from Secret %s, want %s", container, v.Name, ref.Name, secretOf(v.Name))
		}
	}
}

func TestCommandParts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want config.Part
	}{
		{[]string{"run"}, config.AllParts},
		{nil, config.AllParts},
		{[]string{"migrate", "--wait=5m"}, config.PartDatabase | config.PartLog},
		{[]string{"dlq", "replay", "--dry-run"}, config.PartKafka | config.PartLog},
	} {
		if got := commandParts(t, tc.args); got != tc.want {
			t.Errorf("billing %q reads %s, want %s", tc.args, got, tc.want)
		}
	}
}
