package config

import (
	"os"
	"testing"
)

// unsetenv removes name for the rest of the test and restores it after;
// t.Setenv can only set, and an empty value is not the same as unset.
func unsetenv(t *testing.T, name string) {
	t.Helper()
	t.Setenv(name, "") // registers the restore
	os.Unsetenv(name)
}
