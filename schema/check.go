package schema

import (
	"fmt"
	"strings"

	"github.com/lockkit/lockkit/internal/policy"
)

// validName reports whether s is a domain name: [a-z][a-z0-9_]*.
func validName(s string) bool {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// deriveName joins the words of a pattern's literals with "_":
// "user:{id:int64}:digest" → "user_digest". A word is a run of ASCII letters
// and digits; letters are lower-cased. The result may not be a valid name
// ("" for "{id}", "2fa" for "2fa:{id}"); the caller checks.
func deriveName(segs []Segment) string {
	var words []string
	for _, s := range segs {
		if s.IsParam() {
			continue
		}
		for _, w := range strings.FieldsFunc(strings.ToLower(s.Literal), func(r rune) bool {
			return !('a' <= r && r <= 'z' || '0' <= r && r <= '9')
		}) {
			words = append(words, w)
		}
	}
	return strings.Join(words, "_")
}

// nameSuggestion turns an invalid derived name into a valid one for a hint.
func nameSuggestion(derived string) string {
	switch {
	case derived == "":
		return "my_lock"
	case derived[0] < 'a' || derived[0] > 'z':
		return "d" + derived
	}
	return derived
}

// validGoName reports whether s is an exported Go identifier of ASCII
// letters and digits.
func validGoName(s string) bool {
	if s == "" || s[0] < 'A' || s[0] > 'Z' {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}

// deriveGoName is the CamelCase of a name: "user_digest" → "UserDigest".
func deriveGoName(name string) string {
	var b strings.Builder
	for _, part := range strings.Split(name, "_") {
		if part == "" {
			continue
		}
		b.WriteString(strings.ToUpper(part[:1]))
		b.WriteString(part[1:])
	}
	return b.String()
}

// goNameSuggestion turns anything into a valid Go name for a hint.
func goNameSuggestion(s string) string {
	var b strings.Builder
	upper := true
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9':
			if b.Len() == 0 && '0' <= c && c <= '9' {
				b.WriteString("D")
			}
			if upper {
				c = strings.ToUpper(string(c))[0]
			}
			b.WriteByte(c)
			upper = false
		default:
			upper = true
		}
	}
	out := b.String()
	if out == "" {
		return "MyLock"
	}
	for _, r := range reservedGoNames {
		if out == r {
			return out + "Lock"
		}
	}
	return out
}

// checkDomains runs the checks across domains: names and Go names are unique
// and do not collide with generated identifiers, no pattern is ambiguous, and
// no two patterns can produce the same key.
func (p *parser) checkDomains() {
	names := map[string]*domainEntry{}
	for _, d := range p.entries {
		if d.Name == "" {
			continue
		}
		if prev, dup := names[d.Name]; dup {
			p.add(pos(d.nameNode), "%s: the name %q is already used by the domain at line %d; set name: to tell them apart (a name is derived from the pattern's literal words unless set)",
				d.label, d.Name, prev.Pos.Line)
			if !d.goNameSet {
				d.GoName = "" // derived from the duplicate: one error is enough
			}
			continue
		}
		names[d.Name] = d
	}

	// The Go names each domain adds to the generated package: the constructor
	// X (function and method) and the type XLock.
	type owner struct {
		d    *domainEntry
		what string
	}
	idents := map[string]owner{}
	for _, r := range reservedGoNames {
		idents[r] = owner{}
	}
	for _, d := range p.entries {
		if d.GoName == "" {
			continue
		}
		typeName := policy.TypeName(d.GoName, d.Kind)
		mine := []owner{{d, "constructor " + d.GoName}, {d, "type " + typeName}}
		clash := false
		for i, id := range []string{d.GoName, typeName} {
			prev, taken := idents[id]
			switch {
			case !taken:
				continue
			case prev.d == nil:
				p.add(pos(d.goNode), "%s: Go name %q would declare %s, which the generated package already declares (%s); set go_name: to another name",
					d.label, d.GoName, id, strings.Join(reservedGoNames, ", "))
			default:
				p.add(pos(d.goNode), "%s: Go name %q would declare the %s, which the domain at line %d (%q) already declares as its %s; set go_name: to tell them apart",
					d.label, d.GoName, mine[i].what, prev.d.Pos.Line, prev.d.Name, prev.what)
			}
			clash = true
			break
		}
		if clash {
			continue
		}
		idents[d.GoName] = mine[0]
		idents[typeName] = mine[1]
	}

	var valid []*domainEntry
	var automata []*compiled
	for _, d := range p.entries {
		if !d.patternOK {
			continue
		}
		valid = append(valid, d)
		automata = append(automata, newCompiled(d.Segments))
		if a, b, ok := adjacentParams(d.Segments); ok {
			p.add(d.PatternPos, "%s: pattern %q is ambiguous: {%s} and {%s} are next to each other, so a key cannot tell where one ends; separate them with a literal that contains \":\", as in {%s}:{%s}",
				d.label, d.Pattern, a, b, a, b)
		} else if key, params, ok := ambiguity(d.Segments); ok {
			p.add(d.PatternPos, "%s: pattern %q is ambiguous: the key suffix %q splits into {%s} in two ways; separate parameters with a literal that contains \":\"%s",
				d.label, d.Pattern, key, strings.Join(params, "}, {"), asIn(params))
		}
	}
	// Overlaps: one message per domain, naming the first earlier domain it
	// overlaps in full and at most maxOthers more. Patterns that are the same
	// key language (the same literals and parameter classes, as a pattern
	// repeated through a YAML alias is) overlap without a search, and the
	// search stops after maxOverlapMessages domains, so neither the work nor
	// the output grows past a bound however many domains overlap.
	const (
		maxOthers          = 3
		maxOverlapMessages = 20
	)
	canon := make([]string, len(valid))
	for i, d := range valid {
		canon[i] = canonicalPattern(d.Segments)
	}
	sameExample := map[string]string{} // canonical pattern -> an example key
	reported := 0
	for i, d := range valid {
		if reported == maxOverlapMessages {
			p.add(d.PatternPos, "%s and the %d domains after it were not checked for overlaps: %d domains already overlap earlier ones; fix those first",
				d.label, len(valid)-i-1, reported)
			break
		}
		var first *domainEntry
		var example string
		var others []string
		more := 0
		for j, prev := range valid[:i] {
			var key string
			var ok bool
			if canon[j] == canon[i] {
				key, ok = sameExample[canon[i]]
				if !ok {
					key, ok = automata[j].Overlap(automata[i])
					sameExample[canon[i]] = key
				}
			} else {
				key, ok = automata[j].Overlap(automata[i])
			}
			switch {
			case !ok:
			case first == nil:
				first, example = prev, key
			case len(others) < maxOthers:
				others = append(others, fmt.Sprintf("%s (line %d)", prev.label, prev.Pos.Line))
			default:
				more++
			}
		}
		if first == nil {
			continue
		}
		reported++
		also := ""
		if more > 0 {
			others = append(others, fmt.Sprintf("%d more", more))
		}
		if len(others) > 0 {
			also = "; it also overlaps " + joinAnd(others)
		}
		p.add(d.PatternPos, "%s: pattern %q can produce the same key as %s (line %d, pattern %q), e.g. %q%s; change the literal parts so that no key fits both",
			d.label, d.Pattern, first.label, first.Pos.Line, first.Pattern, p.fullKey(example), also)
	}
}

// canonicalPattern names a pattern's key language: its literals, and each
// parameter by the class of bytes its encoding uses. Two patterns with the
// same canonical form produce the same keys.
func canonicalPattern(segs []Segment) string {
	var b strings.Builder
	for _, s := range segs {
		if !s.IsParam() {
			b.WriteString(s.Literal)
			continue
		}
		b.WriteByte(0)
		switch s.Type {
		case TypeString:
			b.WriteByte('s')
		default:
			if strings.HasPrefix(string(s.Type), "uint") {
				b.WriteByte('u')
			} else {
				b.WriteByte('i')
			}
		}
	}
	return b.String()
}

// asIn shows the fix for two ambiguous parameters.
func asIn(params []string) string {
	if len(params) < 2 {
		return ""
	}
	return fmt.Sprintf(", as in {%s}:{%s}", params[0], params[1])
}

func joinAnd(xs []string) string {
	if len(xs) < 2 {
		return strings.Join(xs, "")
	}
	return strings.Join(xs[:len(xs)-1], ", ") + " and " + xs[len(xs)-1]
}
