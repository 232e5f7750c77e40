package fence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Placeholder is how a SQL driver writes query parameters.
type Placeholder uint8

const (
	// Dollar numbers parameters $1, $2, …: PostgreSQL (pgx, lib/pq). It is
	// the zero value.
	Dollar Placeholder = iota
	// Question writes every parameter as ?: SQLite, MySQL.
	Question
)

// defaultColumn is the fence column's name when Table.FenceColumn
// is empty.
const defaultColumn = "fence"

// Table enforces fencing numbers on the rows of one SQL table: each row
// keeps the fence of its last write in a column, and an update applies only
// when its fence is at least that one.
//
// The table needs one nullable bigint column; NULL means "never written
// under a fence", and the first fenced update of such a row applies:
//
//	ALTER TABLE bookings ADD COLUMN fence bigint;
//
// Rows must exist before they are updated (Update does not insert).
//
// Identifiers are double-quoted, with any double quote doubled, so a name can
// never break out of its quotes; they are then case-sensitive, so write them
// as the database stores them (PostgreSQL folds unquoted names to lower case:
// a table created as Bookings is "bookings"). Double quotes are standard SQL:
// PostgreSQL and SQLite accept them, MySQL only with sql_mode ANSI_QUOTES.
type Table struct {
	// Schema optionally qualifies Table ("public").
	Schema string
	// Table is the table's name. Required.
	Table string
	// KeyColumn is the column that selects the row, usually the primary
	// key; it should be unique. Required.
	KeyColumn string
	// FenceColumn holds each row's fence; "" means "fence".
	FenceColumn string
	// Placeholder is the driver's parameter style; the zero value is Dollar.
	Placeholder Placeholder
}

// Column is one column an update sets, and its new value.
type Column struct {
	Name  string
	Value any
}

// Execer runs statements and single-row queries: *sql.DB, *sql.Tx and
// *sql.Conn all satisfy it, over any database/sql driver (for pgx, its
// stdlib package). With a *sql.Tx, the update commits or rolls back with the
// rest of the transaction.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Update sets the columns of the row whose KeyColumn equals key and records
// fence as the row's fence, in one conditional UPDATE that applies only when
// the row's fence is NULL or at most fence:
//
//	UPDATE "bookings" SET "guest" = $1, "fence" = $2
//	WHERE "id" = $3 AND ("fence" IS NULL OR "fence" <= $4)
//
// It returns nil when the row was updated. When no row was, it reads the
// row's fence to say why: a stored fence above fence is a *Error that
// matches ErrFenced (a newer lock holder has written); a missing row is an
// error matching sql.ErrNoRows, never ErrFenced.
//
// "At most", not "below": the same lease may update a row several times, and
// no two leases share a fence (see "Fences" in docs/semantics.md), so a
// stale holder is turned away either way, once anyone with a newer lease has
// written.
//
// The database decides, not the caller: concurrent updates of one row are
// serialized by the row lock, and each one's condition is checked against
// the row as the previous one left it. fence must be > 0 (a lease of a
// domain without fencing has fence 0). set may be empty: the update then
// records the fence alone, which fences off older leases before any other
// write.
//
// MySQL reports changed rows, not matched ones, unless the DSN has
// clientFoundRows=true; without it, an update that changes nothing looks
// like a rejected one.
func (t Table) Update(ctx context.Context, db Execer, key any, fence int64, set ...Column) error {
	query, args, err := t.Statement(key, fence, set...)
	if err != nil {
		return err
	}
	if isNil(db) {
		return fmt.Errorf("lockkit: fenced update %s: the Execer (db) is nil", t.row(key))
	}
	res, err := db.ExecContext(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("lockkit: fenced update %s: %w", t.row(key), err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("lockkit: fenced update %s: rows affected: %w", t.row(key), err)
	}
	if n > 0 {
		return nil
	}
	// Nothing matched: the row is missing or its fence is higher. Ask which,
	// on the same connection or transaction.
	var stored sql.NullInt64
	err = db.QueryRowContext(ctx, t.selectFence(), key).Scan(&stored)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("lockkit: fenced update %s: no such row: %w", t.row(key), sql.ErrNoRows)
	case err != nil:
		return fmt.Errorf("lockkit: fenced update %s: no row updated, and reading its fence failed: %w", t.row(key), err)
	case stored.Valid && stored.Int64 > fence:
		return &Error{Resource: t.row(key), Fence: fence, Current: stored.Int64}
	}
	return fmt.Errorf("lockkit: fenced update %s: no row updated, yet its fence is %s, not above %d: the row changed meanwhile (outside a transaction), or the driver reports changed rather than matched rows",
		t.row(key), nullString(stored), fence)
}

// Statement returns Update's UPDATE statement and its arguments, for callers
// that run it themselves: pgx without database/sql (pgxpool.Pool.Exec), a
// query builder, a batch. Zero rows affected means the row is missing or its
// fence is above fence. It fails when a name is empty or holds a NUL byte,
// when set names the fence column, or when fence is not > 0.
func (t Table) Statement(key any, fence int64, set ...Column) (query string, args []any, err error) {
	if err := t.check(fence, set); err != nil {
		return "", nil, err
	}
	fc := t.fenceColumn()
	var b strings.Builder
	b.WriteString("UPDATE ")
	b.WriteString(t.table())
	b.WriteString(" SET ")
	args = make([]any, 0, len(set)+3)
	for _, c := range set {
		b.WriteString(quoteIdent(c.Name))
		b.WriteString(" = ")
		args = append(args, c.Value)
		b.WriteString(t.param(len(args)))
		b.WriteString(", ")
	}
	b.WriteString(quoteIdent(fc))
	b.WriteString(" = ")
	args = append(args, fence)
	b.WriteString(t.param(len(args)))
	b.WriteString(" WHERE ")
	b.WriteString(quoteIdent(t.KeyColumn))
	b.WriteString(" = ")
	args = append(args, key)
	b.WriteString(t.param(len(args)))
	b.WriteString(" AND (")
	b.WriteString(quoteIdent(fc))
	b.WriteString(" IS NULL OR ")
	b.WriteString(quoteIdent(fc))
	b.WriteString(" <= ")
	args = append(args, fence)
	b.WriteString(t.param(len(args)))
	b.WriteString(")")
	return b.String(), args, nil
}

func (t Table) check(fence int64, set []Column) error {
	var errs []error
	name := func(what, s string) {
		switch {
		case s == "":
			errs = append(errs, fmt.Errorf("%s is empty", what))
		case strings.IndexByte(s, 0) >= 0:
			errs = append(errs, fmt.Errorf("%s %q holds a NUL byte", what, s))
		}
	}
	if t.Schema != "" {
		name("Schema", t.Schema)
	}
	name("Table", t.Table)
	name("KeyColumn", t.KeyColumn)
	if t.FenceColumn != "" {
		name("FenceColumn", t.FenceColumn)
	}
	if t.Placeholder > Question {
		errs = append(errs, fmt.Errorf("unknown Placeholder %d", t.Placeholder))
	}
	seen := make(map[string]bool, len(set))
	for i, c := range set {
		name(fmt.Sprintf("set column %d's name", i), c.Name)
		switch {
		case c.Name == t.fenceColumn():
			errs = append(errs, fmt.Errorf("set column %q is the fence column, which the update sets itself", c.Name))
		case seen[c.Name]:
			errs = append(errs, fmt.Errorf("set column %q appears twice", c.Name))
		}
		seen[c.Name] = true
	}
	if fence <= 0 {
		errs = append(errs, fmt.Errorf("fence %d is not a fencing number (> 0); is fencing on for the lock's domain?", fence))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("lockkit: fenced update of table %q: %w", t.Table, err)
	}
	return nil
}

func (t Table) fenceColumn() string {
	if t.FenceColumn == "" {
		return defaultColumn
	}
	return t.FenceColumn
}

func (t Table) table() string {
	if t.Schema != "" {
		return quoteIdent(t.Schema) + "." + quoteIdent(t.Table)
	}
	return quoteIdent(t.Table)
}

func (t Table) param(n int) string {
	if t.Placeholder == Question {
		return "?"
	}
	return "$" + strconv.Itoa(n)
}

func (t Table) selectFence() string {
	return "SELECT " + quoteIdent(t.fenceColumn()) + " FROM " + t.table() + " WHERE " + quoteIdent(t.KeyColumn) + " = " + t.param(1)
}

// row names the row for errors: "bookings" row "id" = 12.
func (t Table) row(key any) string {
	return fmt.Sprintf("%s row %s = %v", t.table(), quoteIdent(t.KeyColumn), key)
}

// quoteIdent quotes a SQL identifier: in double quotes, each double quote
// doubled, as the SQL standard has it.
func quoteIdent(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}

func nullString(n sql.NullInt64) string {
	if !n.Valid {
		return "NULL"
	}
	return strconv.FormatInt(n.Int64, 10)
}
