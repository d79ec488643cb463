// Package migrations holds billing's database schema as numbered SQL files,
// embedded into the binary. infra/postgres applies them in name order, each
// once, in its own transaction, or statement by statement outside one when
// its first line is "-- billing:no-transaction" (README.md: such a file must
// be safe to run again after it failed half-way). A file, once released, is
// never edited: a change is a new file.
package migrations

import "embed"

// FS holds the migration files, named NNNN_description.sql.
//
//go:embed *.sql
var FS embed.FS
