package schema

import (
	"testing"

	"github.com/lockkit/lockkit/internal/keylang"
)

// keylang knows every parameter type the schema accepts.
func TestKeylangKnowsParamTypes(t *testing.T) {
	for _, typ := range paramTypes {
		if _, ok := keylang.EncodingOf(string(typ)); !ok {
			t.Errorf("keylang does not know the type %q", typ)
		}
	}
}

// keylang.Parse, the runtime's reader of a generated DomainSpec's pattern,
// reads every pattern the schema accepts into the same segments, and
// refuses what the schema refuses.
func TestKeylangParseAgrees(t *testing.T) {
	for _, p := range []string{
		"table:{id}", "user:{id:int64}:digest", "a", "{x}:b", "cron:{job}:{hour:uint32}", "x:{a:int32}-{b:uint}", "ü:{s:string}",
		"a}{b", "a{", "{}", "{x:float}", "a:{x", "}", "{a{b}}",
	} {
		want, errs := parsePattern(p)
		got, ok := keylang.Parse(p)
		if ok != (len(errs) == 0) {
			t.Errorf("keylang.Parse(%q) ok %v, the schema's errors %v", p, ok, errs)
			continue
		}
		if ok && len(lang(want)) != len(got) {
			t.Errorf("keylang.Parse(%q) = %v, the schema's %v", p, got, want)
			continue
		}
		for i := range got {
			if ok && got[i] != lang(want)[i] {
				t.Errorf("keylang.Parse(%q)[%d] = %+v, the schema's %+v", p, i, got[i], lang(want)[i])
			}
		}
	}
}
