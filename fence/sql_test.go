package fence

import (
	"strings"
	"testing"
)

// The generated statement, per placeholder style, with identifiers quoted so
// that no name can break out of its quotes; invalid tables are refused.
func TestFencedTableStatement(t *testing.T) {
	set := []Column{{"guest", "ana"}, {"seats", 4}}
	for _, tc := range []struct {
		table Table
		want  string
	}{{
		Table{Table: "bookings", KeyColumn: "id"},
		`UPDATE "bookings" SET "guest" = $1, "seats" = $2, "fence" = $3 WHERE "id" = $4 AND ("fence" IS NULL OR "fence" <= $5)`,
	}, {
		Table{Schema: "app", Table: "bookings", KeyColumn: "id", FenceColumn: "lock_token", Placeholder: Question},
		`UPDATE "app"."bookings" SET "guest" = ?, "seats" = ?, "lock_token" = ? WHERE "id" = ? AND ("lock_token" IS NULL OR "lock_token" <= ?)`,
	}, {
		Table{Table: `x" = 1; DROP TABLE bookings; --`, KeyColumn: `i"d`},
		`UPDATE "x"" = 1; DROP TABLE bookings; --" SET "guest" = $1, "seats" = $2, "fence" = $3 WHERE "i""d" = $4 AND ("fence" IS NULL OR "fence" <= $5)`,
	}} {
		q, args, err := tc.table.Statement("12", 7, set...)
		if err != nil {
			t.Fatal(err)
		}
		if q != tc.want {
			t.Errorf("Statement =\n%s\nwant\n%s", q, tc.want)
		}
		if want := []any{"ana", 4, int64(7), "12", int64(7)}; len(args) != len(want) || args[0] != want[0] || args[1] != want[1] || args[2] != want[2] || args[3] != want[3] || args[4] != want[4] {
			t.Errorf("args = %v, want %v", args, want)
		}
	}
	q, _, err := Table{Table: "t", KeyColumn: "k"}.Statement(1, 1)
	if want := `UPDATE "t" SET "fence" = $1 WHERE "k" = $2 AND ("fence" IS NULL OR "fence" <= $3)`; err != nil || q != want {
		t.Errorf("no set columns: %q, %v; want %q", q, err, want)
	}

	for _, bad := range []struct {
		table Table
		fence int64
		set   []Column
		says  string
	}{
		{Table{KeyColumn: "id"}, 1, nil, "Table is empty"},
		{Table{Table: "t"}, 1, nil, "KeyColumn is empty"},
		{Table{Table: "t", KeyColumn: "id"}, 1, []Column{{"", 1}}, "name is empty"},
		{Table{Table: "t\x00", KeyColumn: "id"}, 1, nil, "NUL"},
		{Table{Table: "t", KeyColumn: "id"}, 1, []Column{{"fence", 1}}, "is the fence column"},
		{Table{Table: "t", KeyColumn: "id"}, 1, []Column{{"a", 1}, {"a", 2}}, "appears twice"},
		{Table{Table: "t", KeyColumn: "id", Placeholder: 9}, 1, nil, "Placeholder"},
		{Table{Table: "t", KeyColumn: "id"}, 0, nil, "fence 0 is not a fencing number"},
	} {
		if _, _, err := bad.table.Statement(1, bad.fence, bad.set...); err == nil || !strings.Contains(err.Error(), bad.says) {
			t.Errorf("%+v fence %d set %v: err = %v, want it to say %q", bad.table, bad.fence, bad.set, err, bad.says)
		}
	}
}
